#!/bin/sh
# One-shot job of docker-compose.yml: the Temporal namespace and the search attributes grove-temporal's workflows
# set (workflows/search.py; the local stack registers the same ones, localstack/temporal.py). Idempotent.
set -eu
address=${TEMPORAL_ADDRESS:-temporal:7233}
namespace=${TEMPORAL_NAMESPACE:-default}
t() { temporal --address "$address" "$@"; }
until t operator cluster health >/dev/null 2>&1; do echo "waiting for Temporal at $address"; sleep 2; done
t operator namespace describe --namespace "$namespace" >/dev/null 2>&1 \
  || t operator namespace create --namespace "$namespace" --retention 72h
# A new namespace reaches the frontend's namespace cache a few seconds after it is registered.
until existing=$(t operator search-attribute list --namespace "$namespace" 2>/dev/null); do
  echo "waiting for namespace $namespace"; sleep 2
done
for pair in GroveNamespace:Keyword GrovePodCliqueSet:Keyword GrovePhase:Keyword GroveReplica:Int GrovePaused:Bool; do
  name=${pair%%:*}
  type=${pair#*:}
  if ! echo "$existing" | grep -qw "$name"; then
    t operator search-attribute create --namespace "$namespace" --name "$name" --type "$type"
  fi
done
echo "namespace $namespace and search attributes ready"
