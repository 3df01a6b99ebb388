"""Realistic Dynamo objects as the API server sends them, for the bundled examples and the benchmarks.

A model-serving worker Pod weighs about 10 KB on the wire: managed fields, a long environment, probes,
GPU resources, volumes. Only a few hundred bytes of it matter to a diagnosis, which is what the typed
projections in `stream.objects` are for.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

GRAPH = "nvidia.com/dynamo-graph-deployment-name"
COMPONENT = "nvidia.com/dynamo-component"
SELECTOR = "nvidia.com/selector"


def uid(*parts: str) -> str:
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def component_labels(graph: str, component: str, kind: str = "worker") -> dict[str, str]:
    return {
        GRAPH: graph,
        COMPONENT: component,
        SELECTOR: f"{graph}-{component.lower()}",
        "nvidia.com/dynamo-component-type": kind,
        "nvidia.com/dynamo-namespace": f"{graph}-ns",
        "app.kubernetes.io/managed-by": "dynamo-operator",
        "app.kubernetes.io/part-of": graph,
        "app.kubernetes.io/name": f"{graph}-{component.lower()}",
    }


def _env() -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "DYN_NAMESPACE", "value": "dynamo"},
        {"name": "DYN_PARENT_DGD_K8S_NAME", "value": "llm"},
        {"name": "DYN_SYSTEM_ENABLED", "value": "true"},
        {"name": "DYN_SYSTEM_PORT", "value": "9090"},
        {"name": "DYN_HEALTH_CHECK_ENABLED", "value": "true"},
        {"name": "NATS_SERVER", "value": "nats://dynamo-platform-nats.dynamo-system.svc.cluster.local:4222"},
        {"name": "ETCD_ENDPOINTS", "value": "dynamo-platform-etcd.dynamo-system.svc.cluster.local:2379"},
        {"name": "HF_HOME", "value": "/opt/models/huggingface"},
        {"name": "VLLM_WORKER_MULTIPROC_METHOD", "value": "spawn"},
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "NCCL_IB_DISABLE", "value": "0"},
        {"name": "CUDA_DEVICE_MAX_CONNECTIONS", "value": "1"},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}},
        {"name": "POD_UID", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.uid"}}},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"key": "HF_TOKEN", "name": "hf-token-secret"}}},
    ]
    for i in range(12):
        env.append({"name": f"DYN_WORKER_OPTION_{i}", "value": f"option-value-{i}-" + "x" * 24})
    return env


def _probe(path: str, period: int, threshold: int) -> dict[str, Any]:
    return {
        "failureThreshold": threshold,
        "httpGet": {"path": path, "port": "system", "scheme": "HTTP"},
        "initialDelaySeconds": 0,
        "periodSeconds": period,
        "successThreshold": 1,
        "timeoutSeconds": 5,
    }


def _managed_fields() -> list[dict[str, Any]]:
    spec_fields = {f'k:{{"name":"DYN_WORKER_OPTION_{i}"}}': {".": {}, "f:name": {}, "f:value": {}} for i in range(12)}
    return [
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:generateName": {},
                    "f:labels": {".": {}, f"f:{GRAPH}": {}, f"f:{COMPONENT}": {}},
                    "f:ownerReferences": {".": {}},
                },
                "f:spec": {"f:containers": {'k:{"name":"main"}': {".": {}, "f:env": spec_fields}}},
            },
            "manager": "kube-controller-manager",
            "operation": "Update",
            "time": "2026-11-20T10:00:00Z",
        },
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:status": {
                    "f:conditions": {".": {}},
                    "f:containerStatuses": {},
                    "f:hostIP": {},
                    "f:phase": {},
                    "f:podIP": {},
                    "f:startTime": {},
                }
            },
            "manager": "kubelet",
            "operation": "Update",
            "subresource": "status",
            "time": "2026-11-20T10:00:03Z",
        },
    ]


def worker_pod(
    namespace: str,
    name: str,
    graph: str,
    component: str,
    template_hash: str = "6d9f7c8b5",
    owner: str | None = None,
    node: str = "gpu-node-07",
) -> dict[str, Any]:
    """A Pending worker Pod just scheduled; set its status with the helpers below."""
    labels = component_labels(graph, component)
    labels["pod-template-hash"] = template_hash
    owner = owner or f"{graph}-{component.lower()}-{template_hash}"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "generateName": f"{owner}-",
            "namespace": namespace,
            "uid": uid(namespace, name),
            "resourceVersion": "1000",
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": labels,
            "annotations": {
                "kubectl.kubernetes.io/default-container": "main",
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "nvidia.com/deployment-hash": template_hash,
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": owner,
                    "uid": uid(namespace, owner),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": _managed_fields(),
        },
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.7.1",
                    "command": ["/bin/sh", "-c"],
                    "args": [
                        "python3 -m dynamo.vllm --model Qwen/Qwen3-0.6B --tensor-parallel-size 1 "
                        "--max-model-len 32768 --gpu-memory-utilization 0.90 --enforce-eager "
                        "--kv-events-config '{\"enable_kv_cache_events\": true}'"
                    ],
                    "env": _env(),
                    "ports": [{"containerPort": 9090, "name": "system", "protocol": "TCP"}],
                    "resources": {
                        "limits": {"cpu": "10", "memory": "80Gi", "nvidia.com/gpu": "1"},
                        "requests": {"cpu": "10", "memory": "80Gi", "nvidia.com/gpu": "1"},
                    },
                    "livenessProbe": _probe("/live", 5, 1),
                    "readinessProbe": _probe("/health", 10, 60),
                    "startupProbe": _probe("/live", 10, 720),
                    "volumeMounts": [
                        {"mountPath": "/dev/shm", "name": "shared-memory"},
                        {"mountPath": "/opt/models", "name": "model-cache"},
                        {
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "name": "kube-api-access-x7k2p",
                            "readOnly": True,
                        },
                    ],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "initContainers": [
                {
                    "name": "model-download",
                    "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.7.1",
                    "command": ["huggingface-cli", "download", "Qwen/Qwen3-0.6B"],
                    "volumeMounts": [{"mountPath": "/opt/models", "name": "model-cache"}],
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                }
            ],
            "volumes": [
                {"name": "shared-memory", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                {"name": "model-cache", "persistentVolumeClaim": {"claimName": "dynamo-model-cache"}},
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                            "path": "namespace",
                                        }
                                    ]
                                }
                            },
                        ],
                    },
                },
            ],
            "tolerations": [
                {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"},
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
                {
                    "effect": "NoExecute",
                    "key": "node.kubernetes.io/unreachable",
                    "operator": "Exists",
                    "tolerationSeconds": 300,
                },
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}
                                ]
                            }
                        ]
                    }
                }
            },
            "nodeName": node,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "serviceAccountName": f"{graph}-worker",
            "terminationGracePeriodSeconds": 60,
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
        },
        "status": {
            "phase": "Pending",
            "qosClass": "Guaranteed",
            "hostIP": "10.0.7.21",
            "podIP": "10.244.7.33",
            "startTime": "2026-11-20T10:00:01Z",
            "conditions": [],
            "initContainerStatuses": [],
            "containerStatuses": [],
        },
    }


def _container_status(
    name: str, restarts: int, state: dict[str, Any], last: dict[str, Any], ready: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.7.1",
        "imageID": "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + "4f" * 32,
        "containerID": "containerd://" + "9a" * 32,
        "ready": ready,
        "started": ready,
        "restartCount": restarts,
        "state": state,
        "lastState": last,
    }


def _conditions(ready: bool, initialized: bool = True) -> list[dict[str, Any]]:
    def cond(type_: str, ok: bool, reason: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": type_,
            "status": "True" if ok else "False",
            "lastTransitionTime": "2026-11-20T10:00:02Z",
            "lastProbeTime": None,
        }
        if reason and not ok:
            out["reason"] = reason
        return out

    return [
        cond("PodReadyToStartContainers", True),
        cond("Initialized", initialized, "ContainersNotInitialized"),
        cond("Ready", ready, "ContainersNotReady"),
        cond("ContainersReady", ready, "ContainersNotReady"),
        cond("PodScheduled", True),
    ]


def _init_done() -> dict[str, Any]:
    return _container_status(
        "model-download",
        0,
        {
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": "2026-11-20T10:00:02Z",
                "finishedAt": "2026-11-20T10:00:09Z",
            }
        },
        {},
    )


def set_running(pod: dict[str, Any], restarts: int = 0, ready: bool = True) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["status"].update(
        phase="Running",
        conditions=_conditions(ready),
        initContainerStatuses=[_init_done()],
        containerStatuses=[
            _container_status("main", restarts, {"running": {"startedAt": "2026-11-20T10:01:00Z"}}, {}, ready=ready)
        ],
    )
    return pod


def set_crashing(
    pod: dict[str, Any], restarts: int, exit_code: int = 1, reason: str = "Error", waiting: bool = True
) -> dict[str, Any]:
    """The main container died `restarts` times; now waiting in CrashLoopBackOff (or just terminated)."""
    pod = copy.deepcopy(pod)
    terminated = {
        "terminated": {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": "2026-11-20T10:00:10Z",
            "finishedAt": "2026-11-20T10:00:40Z",
        }
    }
    state = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}
    pod["status"].update(
        phase="Running",
        conditions=_conditions(False),
        initContainerStatuses=[_init_done()],
        containerStatuses=[
            _container_status("main", restarts, state if waiting else terminated, terminated if waiting else {})
        ],
    )
    return pod


def set_init_crashing(pod: dict[str, Any], restarts: int, exit_code: int = 1) -> dict[str, Any]:
    """The init container fails over and over: the Pod stays Pending and Initialized=False."""
    pod = copy.deepcopy(pod)
    pod["status"].update(
        phase="Pending",
        conditions=_conditions(False, initialized=False),
        initContainerStatuses=[
            _container_status(
                "model-download",
                restarts,
                {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 20s restarting failed container"}},
                {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Error",
                        "startedAt": "2026-11-20T10:00:02Z",
                        "finishedAt": "2026-11-20T10:00:05Z",
                    }
                },
            )
        ],
        containerStatuses=[_container_status("main", 0, {"waiting": {"reason": "PodInitializing"}}, {})],
    )
    return pod


def terminating(pod: dict[str, Any], at: str) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = at
    pod["metadata"]["deletionGracePeriodSeconds"] = 60
    return pod


def deployment(
    namespace: str,
    graph: str,
    component: str,
    dcd: str,
    generation: int = 1,
    available: bool = False,
    template_hash: str = "6d9f7c8b5",
) -> dict[str, Any]:
    name = f"{graph}-{component.lower()}"
    labels = component_labels(graph, component)
    return {
        "kind": "Deployment",
        "apiVersion": "apps/v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid(namespace, "deploy", name),
            "generation": generation,
            "resourceVersion": "900",
            "labels": labels,
            "annotations": {"deployment.kubernetes.io/revision": str(generation)},
            "ownerReferences": [
                {
                    "apiVersion": "nvidia.com/v1alpha1",
                    "kind": "DynamoComponentDeployment",
                    "name": dcd,
                    "uid": uid(namespace, "dcd", dcd),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {SELECTOR: labels[SELECTOR]}},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [{"name": "main", "image": "x"}]}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
        },
        "status": {
            "observedGeneration": generation,
            "replicas": 1,
            "readyReplicas": 1 if available else 0,
            "availableReplicas": 1 if available else 0,
            "updatedReplicas": 1,
            "conditions": [
                {
                    "type": "Available",
                    "status": "True" if available else "False",
                    "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                    "lastTransitionTime": "2026-11-20T10:00:00Z",
                    "lastUpdateTime": "2026-11-20T10:00:00Z",
                    "message": "Deployment has minimum availability."
                    if available
                    else "Deployment does not have minimum availability.",
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "NewReplicaSetAvailable",
                    "lastTransitionTime": "2026-11-20T10:00:00Z",
                    "lastUpdateTime": "2026-11-20T10:00:00Z",
                    "message": f'ReplicaSet "{name}-{template_hash}" has successfully progressed.',
                },
            ],
        },
    }


def dcd(
    namespace: str,
    graph: str,
    component: str,
    name: str,
    generation: int = 1,
    available: str = "False",
    reason: str = "DeploymentNotReady",
    message: str = "Deployment is not ready",
    api_version: str = "nvidia.com/v1alpha1",
) -> dict[str, Any]:
    return {
        "kind": "DynamoComponentDeployment",
        "apiVersion": api_version,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid(namespace, "dcd", name),
            "generation": generation,
            "resourceVersion": "800",
            "labels": {GRAPH: graph, COMPONENT: component},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": "DynamoGraphDeployment",
                    "name": graph,
                    "uid": uid(namespace, "dgd", graph),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {"componentType": "worker", "replicas": 1, "dynamoNamespace": f"{graph}-ns"},
        "status": {
            "observedGeneration": generation,
            "conditions": [
                {
                    "type": "Available",
                    "status": available,
                    "reason": reason,
                    "message": message,
                    "observedGeneration": generation,
                    "lastTransitionTime": "2026-11-20T10:00:00Z",
                },
                {
                    "type": "DynamoComponentReady",
                    "status": "True",
                    "reason": "Reconciled",
                    "message": "reconciled",
                    "observedGeneration": generation,
                    "lastTransitionTime": "2026-11-20T10:00:00Z",
                },
            ],
        },
    }


def dgd(
    namespace: str,
    name: str,
    state: str = "pending",
    reason: str = "some_resources_are_not_ready",
    message: str = "Resources not ready",
    generation: int = 1,
    api_version: str = "nvidia.com/v1alpha1",
) -> dict[str, Any]:
    return {
        "kind": "DynamoGraphDeployment",
        "apiVersion": api_version,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid(namespace, "dgd", name),
            "generation": generation,
            "resourceVersion": "700",
        },
        "spec": {"services": {}},
        "status": {
            "state": state,
            "observedGeneration": generation,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if state == "successful" else "False",
                    "reason": reason,
                    "message": message,
                    "observedGeneration": generation,
                    "lastTransitionTime": "2026-11-20T10:00:00Z",
                }
            ],
        },
    }
