"""KWOK Stage configuration: how fake nodes and the pods bound to them behave (what a kubelet would report).

KWOK re-evaluates a managed object on each change and plays a stage whose selector matches, so the selectors below
are mutually exclusive:

node-ready             a new node becomes Ready (capacity and addresses, set when the stack created it, stay as is)
node-status-refresh    a Ready node re-posts its status every ~5 minutes, like kubelet's status report (liveness
                       itself is the node Lease, which kwok renews)
pod-running-ready      a bound, Pending pod becomes Running with every container started and ready
pod-running-not-ready  a bound, Pending pod annotated `grove-temporal.io/fake-readiness: fail` (e.g. through its
                       template) becomes Running with its containers started but never ready, as when the readiness
                       probe fails from the start; removing the annotation lets pod-readiness-recovers make it Ready
pod-readiness-fails    a Running, Ready pod annotated `grove-temporal.io/fake-readiness: fail` turns NotReady
                       (Ready=False, ContainersReady=False, containers ready=false) but keeps running, as when its
                       readiness probe fails
pod-readiness-recovers a Running, not-Ready pod without that annotation turns Ready again (also after anything else
                       marked it NotReady, as a kubelet re-reports)
pod-deleted            a pod with a deletionTimestamp is removed, as a kubelet does once its containers stopped
                       (finalizers are respected: the API server keeps the pod until they are gone)
"""

from __future__ import annotations

FAKE_READINESS_ANNOTATION = "grove-temporal.io/fake-readiness"
FAKE_READINESS_FAIL = "fail"

# Placeholders (not f-string braces: the templates are Go templates full of "{{ }}").
_TEMPLATE = r"""
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-ready
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: '@READY@', operator: NotIn, values: ['True']}
  steps:
  - patch:
      subresource: status
      root: status
      type: strategic
      template: |
        {{ $now := Now }}
        phase: Running
        conditions:
        - {type: Ready, status: "True", reason: KubeletReady, message: "kubelet is posting ready status",
           lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
        - {type: MemoryPressure, status: "False", reason: KubeletHasSufficientMemory, message: "",
           lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
        - {type: DiskPressure, status: "False", reason: KubeletHasNoDiskPressure, message: "",
           lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
        - {type: PIDPressure, status: "False", reason: KubeletHasSufficientPID, message: "",
           lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
        daemonEndpoints:
          kubeletEndpoint: {Port: {{ NodePort }}}
        nodeInfo:
          architecture: amd64
          operatingSystem: linux
          kubeletVersion: {{ printf "kwok-v%s" Version | Quote }}
          kubeProxyVersion: {{ printf "kwok-v%s" Version | Quote }}
          containerRuntimeVersion: {{ printf "kwok-v%s" Version | Quote }}
          kernelVersion: {{ printf "kwok-v%s" Version | Quote }}
          osImage: ""
          machineID: ""
          bootID: ""
          systemUUID: ""
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-status-refresh
spec:
  resourceRef: {apiGroup: v1, kind: Node}
  selector:
    matchExpressions:
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '@READY@', operator: In, values: ['True']}
  delay: {durationMilliseconds: 290000, jitterDurationMilliseconds: 310000}
  steps:
  - patch:
      subresource: status
      root: status
      type: strategic
      template: |
        {{ $now := Now }}
        conditions:
        {{ range .status.conditions }}
        - {type: {{ .type | Quote }}, lastHeartbeatTime: {{ $now | Quote }}}
        {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-running-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.annotations["@ANNOTATION@"]', operator: NotIn, values: ['@FAIL@']}
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Pending]}
    - {key: '@READY@', operator: NotIn, values: ['True']}
  steps:
  - patch:
      subresource: status
      root: status
      type: strategic
      template: |
        {{ $now := Now }}
        phase: Running
        startTime: {{ $now | Quote }}
        conditions:
        - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
        - {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
        - {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
        {{ range .spec.readinessGates }}
        - {type: {{ .conditionType | Quote }}, status: "True", lastTransitionTime: {{ $now | Quote }}}
        {{ end }}
        containerStatuses:
        {{ range .spec.containers }}
        - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, started: true, restartCount: 0,
           state: {running: {startedAt: {{ $now | Quote }}}}}
        {{ end }}
        initContainerStatuses:
        {{ range .spec.initContainers }}
        {{ if eq ( or .restartPolicy "" ) "Always" }}
        - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, started: true, restartCount: 0,
           state: {running: {startedAt: {{ $now | Quote }}}}}
        {{ else }}
        - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, restartCount: 0,
           state: {terminated: {exitCode: 0, reason: Completed, startedAt: {{ $now | Quote }}, finishedAt: {{ $now | Quote }}}}}
        {{ end }}
        {{ end }}
        {{ with NodeIPWith .spec.nodeName }}
        hostIP: {{ . | Quote }}
        hostIPs: [{ip: {{ . | Quote }}}]
        {{ end }}
        {{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
        podIP: {{ . | Quote }}
        podIPs: [{ip: {{ . | Quote }}}]
        {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-running-not-ready
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchAnnotations: {'@ANNOTATION@': '@FAIL@'}
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Pending]}
  steps:
  - patch:
      subresource: status
      root: status
      type: strategic
      template: |
        {{ $now := Now }}
        phase: Running
        startTime: {{ $now | Quote }}
        conditions:
        - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
        - {type: ContainersReady, status: "False", reason: ContainersNotReady, message: "readiness probe failed",
           lastTransitionTime: {{ $now | Quote }}}
        - {type: Ready, status: "False", reason: ContainersNotReady, message: "readiness probe failed",
           lastTransitionTime: {{ $now | Quote }}}
        containerStatuses:
        {{ range .spec.containers }}
        - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, started: true, restartCount: 0,
           state: {running: {startedAt: {{ $now | Quote }}}}}
        {{ end }}
        {{ with NodeIPWith .spec.nodeName }}
        hostIP: {{ . | Quote }}
        hostIPs: [{ip: {{ . | Quote }}}]
        {{ end }}
        {{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
        podIP: {{ . | Quote }}
        podIPs: [{ip: {{ . | Quote }}}]
        {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-readiness-fails
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchAnnotations: {'@ANNOTATION@': '@FAIL@'}
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '@READY@', operator: In, values: ['True']}
  steps:
  - patch:
      subresource: status
      root: status
      type: strategic
      template: |
        {{ $now := Now }}
        conditions:
        - {type: ContainersReady, status: "False", reason: ContainersNotReady, message: "readiness probe failed",
           lastTransitionTime: {{ $now | Quote }}}
        - {type: Ready, status: "False", reason: ContainersNotReady, message: "readiness probe failed",
           lastTransitionTime: {{ $now | Quote }}}
        containerStatuses:
        {{ range .status.containerStatuses }}
        - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: false, started: true,
           restartCount: {{ or .restartCount 0 }}, state: {running: {startedAt: {{ $now | Quote }}}}}
        {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-readiness-recovers
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.annotations["@ANNOTATION@"]', operator: NotIn, values: ['@FAIL@']}
    - {key: '.metadata.deletionTimestamp', operator: DoesNotExist}
    - {key: '.status.phase', operator: In, values: [Running]}
    - {key: '@READY@', operator: NotIn, values: ['True']}
  steps:
  - patch:
      subresource: status
      root: status
      type: strategic
      template: |
        {{ $now := Now }}
        conditions:
        - {type: ContainersReady, status: "True", reason: "", message: "", lastTransitionTime: {{ $now | Quote }}}
        - {type: Ready, status: "True", reason: "", message: "", lastTransitionTime: {{ $now | Quote }}}
        containerStatuses:
        {{ range .status.containerStatuses }}
        - {name: {{ .name | Quote }}, image: {{ .image | Quote }}, ready: true, started: true,
           restartCount: {{ or .restartCount 0 }}, state: {running: {startedAt: {{ $now | Quote }}}}}
        {{ end }}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-deleted
spec:
  resourceRef: {apiGroup: v1, kind: Pod}
  selector:
    matchExpressions:
    - {key: '.metadata.deletionTimestamp', operator: Exists}
  steps:
  - delete: true
"""

STAGES_YAML = (
    _TEMPLATE.replace("@READY@", '.status.conditions.[] | select( .type == "Ready" ) | .status')
    .replace("@ANNOTATION@", FAKE_READINESS_ANNOTATION)
    .replace("@FAIL@", FAKE_READINESS_FAIL)
)
