"""Workload backends: what each way Dynamo runs a component adds to the Pods' own story.

Every Pod is diagnosed by the same rules (pipeline.crashloop, pipeline.diagnoses) and found by its graph and
component labels; a backend adds only what its workload object knows and the Pods do not: which DCD a
Deployment serves and whether it is available (`deployments`), how a LeaderWorkerSet's groups are recreated
and whether they are Ready (`lws`), what Grove reports of its PodCliques on the DGD (`grove`). The aggregator
calls each backend through `Backend` alone and a backend never calls back into it: what a backend needs of
the aggregator's state (a component's verdict, its DCDs) is handed to it as an argument.

A new backend is one module here, one line in `pipeline.backends.registry`, its RBAC (k8s/, charts/) and its CRD fixture
(docs/architecture.md lists every file).
"""
