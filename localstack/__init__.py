"""The real local stack: Temporal dev server, etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK.

`binaries` provides the pinned executables (cache, official release, or a build from Go modules);
`stack.LocalStack` starts them as local processes on free loopback ports. Nothing here is imported by the
domain code; the tests, `grove-temporal run` and benchmarks use it.
"""
