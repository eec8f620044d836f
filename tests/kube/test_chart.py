"""The Helm chart, rendered by Helm's own Go engine (helm-python-sdk) and validated against
the Kubernetes schema; the CRD it installs is NVIDIA's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from nodeagent.dra import DRIVER_NAME
from nodeagent.dra.slices import SliceFacts, slice_object
from testbed.kube.schemas import CRD_PATH, assert_valid_dra, assert_valid_kubernetes

helm = pytest.importorskip("helm_python.chart", reason="helm-python-sdk (helm template) absent")

CHART = Path(__file__).resolve().parents[2] / "deploy/helm/domain-portal"
VALUES = {
    "secretKey": "s3cret",
    "databaseUrl": "postgres://portal:pw@db.example:5432/portal",
    "redisUrl": "redis://redis.example:6379/0",
    "agentJoinToken": "join-me",
    "allowedHosts": ["portal.example.com"],
    "web": {"ingress": {"enabled": True, "tlsSecret": "portal-tls"}},
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm.Chart.load(CHART)
    out = chart.render(values, name="portal", namespace="gpu-portal", is_install=True)
    return [
        doc
        for name, text in sorted(out.items())
        if name.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render(VALUES)}


@pytest.mark.parametrize("kube_version", ["v1.32.0", "v1.33.0", "v1.34.0"])
def test_helm_lint_finds_nothing(kube_version):
    report = helm.lint(CHART, VALUES, strict=True, kube_version=kube_version)
    assert report["errors"] == [] and [m for m in report["messages"] if m["severity"] >= 2] == []


def test_every_rendered_object_is_valid_kubernetes(objects):
    kinds = {kind for kind, _ in objects}
    assert {"Deployment", "DaemonSet", "Service", "Ingress", "Job", "ClusterRole"} <= kinds
    for obj in objects.values():
        assert_valid_kubernetes(obj)


def test_it_runs_web_worker_beat_sync_and_the_agent_with_probes(objects):
    deployments = {name for kind, name in objects if kind == "Deployment"}
    assert deployments == {
        "portal-domain-portal-web",
        "portal-domain-portal-worker",
        "portal-domain-portal-notifier",
        "portal-domain-portal-beat",
        "portal-domain-portal-kube-sync",
    }
    # Deliveries on their own queue and worker, never the controller's.
    for name, queue in (("worker", "portal"), ("notifier", "portal.notifications")):
        pod = objects["Deployment", f"portal-domain-portal-{name}"]["spec"]["template"]["spec"]
        (worker,) = pod["containers"]
        assert worker["args"][worker["args"].index("-Q") + 1] == queue
    web = objects["Deployment", "portal-domain-portal-web"]["spec"]["template"]["spec"]
    (container,) = web["containers"]
    # The kubelet asks over plain HTTP: the HTTPS redirect spares the health checks. No
    # interpreter per probe. Prometheus names the pod's address: an allowed host.
    host = [{"name": "Host", "value": "localhost"}]  # allowed whatever the pod's address
    for probe, path in [
        ("liveness", "/healthz"),
        ("readiness", "/readyz"),
        ("startup", "/healthz"),
    ]:
        assert container[f"{probe}Probe"]["httpGet"] == {"path": path, "port": "http",
                                                          "httpHeaders": host}  # fmt: skip
    env = [e["name"] for e in container["env"]]
    assert env.index("POD_IP") < env.index("ALLOWED_HOSTS")  # $(POD_IP) expands only then
    hosts = next(e["value"] for e in container["env"] if e["name"] == "ALLOWED_HOSTS")
    assert hosts.split(",") == [
        "portal.example.com",
        "localhost",
        "portal-domain-portal-web",
        "portal-domain-portal-web.gpu-portal.svc",
        "portal-domain-portal-web.gpu-portal.svc.cluster.local",
        "$(POD_IP)",
    ]
    config = objects["ConfigMap", "portal-domain-portal"]["data"]
    assert config["ALLOWED_HOSTS"] == hosts.removesuffix(",$(POD_IP)")
    assert config["PORTAL_TRUSTED_PROXIES"] == ""  # no loopback exception for probes any more
    assert "portal.serve" in container["args"]
    agent = objects["DaemonSet", "portal-domain-portal-agent"]["spec"]["template"]["spec"]
    (container,) = agent["containers"]
    assert "--health-addr=0.0.0.0:8090" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # As the tray's DRA plugin it reads claims and owns its slice (see the DRA test below).
    assert agent["serviceAccountName"] == "portal-domain-portal-agent"


def daemonsets(objects) -> tuple[dict, dict]:
    agent = objects["DaemonSet", "portal-domain-portal-agent"]
    runner = objects["DaemonSet", "portal-domain-portal-imex-runner"]
    return agent, runner


def mounts(pod: dict) -> dict[str, tuple[str, dict]]:
    """container path → (host path, or "" when not one, mount) of the pod's one container."""
    (container,) = pod["containers"]
    host = {v["name"]: v.get("hostPath", {}).get("path", "") for v in pod["volumes"]}
    return {m["mountPath"]: (host[m["name"]], m) for m in container["volumeMounts"]}


def test_the_agent_runs_as_nvidias_node_components_do(objects):
    agent, _ = daemonsets(objects)
    pod = agent["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["hostNetwork"] and pod["hostPID"] and container["securityContext"]["privileged"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    root, mount = mounts(pod)["/driver-root"]
    assert root == "/" and mount["readOnly"] and mount["mountPropagation"] == "HostToContainer"
    args = container["args"]
    assert {"--driver-root=/driver-root", "--imex-runner", "--root=/"} <= set(args)
    assert not any("nsenter" in a or a.startswith("--imex-bin") for a in args)
    # NVIDIA's IMEX defaults and channel mode, unless told otherwise
    assert {"--imex-grace-time=-1", "--imex-log-level=4", "--channel-mode=0666"} <= set(args)
    # Its own directory, never the driver package's /etc/nvidia-imex
    hosts = {host for host, _ in mounts(pod).values()}
    assert "/var/lib/domain-portal" in hosts and "/etc/nvidia-imex" not in hosts
    assert mounts(pod)["/etc/systemd/system"][1]["readOnly"]  # to see the host's own unit
    assert agent["spec"]["updateStrategy"]["type"] == "RollingUpdate"  # restarts are harmless


def test_the_imex_runner_is_never_restarted_or_killed_by_the_chart(objects):
    agent, runner = daemonsets(objects)
    pod = runner["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert runner["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert container["command"] == ["python", "-m", "nodeagent.runner"]
    assert "livenessProbe" not in container  # nothing that kills the daemon's parent
    assert "memory" not in container["resources"].get("limits", {})
    assert pod["priorityClassName"] == "system-node-critical" and pod["hostNetwork"]
    assert pod["runtimeClassName"] == "nvidia" and "/driver-root" in mounts(pod)
    # the agent and the runner share the agent's directory at the same path
    agent_pod = agent["spec"]["template"]["spec"]
    assert (
        mounts(pod)["/var/lib/domain-portal"][0] == mounts(agent_pod)["/var/lib/domain-portal"][0]
    )
    assert pod["nodeSelector"] == agent_pod["nodeSelector"]


def test_both_node_daemonsets_run_on_every_gpu_node_not_only_on_finished_cliques(objects):
    """As NVIDIA schedules its kubelet plugin: a tray whose fabric registration is
    unfinished or failed has no clique label, and its agent is what reports that."""
    for ds in daemonsets(objects):
        pod = ds["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        assert "affinity" not in pod
        assert "nvidia.com/gpu.clique" not in str(pod)


def test_the_runner_tolerates_every_taint_and_the_agent_only_the_gpu_taint(objects):
    agent, runner = daemonsets(objects)
    # A NoExecute maintenance taint would evict the runner and stop the tray's nvidia-imex.
    assert runner["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]
    assert agent["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_uninstalling_the_release_leaves_the_runner_and_its_daemons(objects):
    """helm.sh/resource-policy keep: `helm uninstall`, agent.enabled=false or a release
    without the runner leave its DaemonSet, so no chart operation stops an IMEX daemon."""
    agent, runner = daemonsets(objects)
    assert runner["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert "annotations" not in agent["metadata"]  # the agent may come and go
    off = {**VALUES, "agent": {"runner": {"keepOnUninstall": False}}}
    _, runner = daemonsets({(o["kind"], o["metadata"]["name"]): o for o in render(off)})
    assert "annotations" not in runner["metadata"]


def test_agent_rollout_replaces_a_quarter_of_the_trays_at_a_time(objects):
    agent, _ = daemonsets(objects)
    assert agent["spec"]["updateStrategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": "25%"},
    }


def test_names_follow_name_and_fullname_overrides():
    names = {(o["kind"], o["metadata"]["name"]) for o in render({**VALUES, "nameOverride": "dp"})}
    assert ("DaemonSet", "portal-dp-imex-runner") in names
    found = render({**VALUES, "fullnameOverride": "gpu-fabric"})
    names = {(o["kind"], o["metadata"]["name"]) for o in found}
    assert {("DaemonSet", "gpu-fabric-agent"), ("Deployment", "gpu-fabric-web")} <= names
    assert not any(name.startswith("portal-") for _, name in names)
    web = next(
        o for o in found if (o["kind"], o["metadata"]["name"]) == ("Deployment", "gpu-fabric-web")
    )
    env = web["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0]["valueFrom"]["secretKeyRef"]["name"] == "gpu-fabric"
    for obj in found:
        assert_valid_kubernetes(obj)


def test_priority_classes_are_configurable():
    values = {**VALUES, "priorityClassName": "portal-high", "agent": {"priorityClassName": ""}}
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(values)}
    for ds in daemonsets(objects):
        assert "priorityClassName" not in ds["spec"]["template"]["spec"]
    for (kind, _), obj in objects.items():
        if kind in ("Deployment", "Job"):
            assert obj["spec"]["template"]["spec"]["priorityClassName"] == "portal-high"
    defaults = {(o["kind"], o["metadata"]["name"]): o for o in render(VALUES)}
    web = defaults["Deployment", "portal-domain-portal-web"]["spec"]["template"]["spec"]
    assert "priorityClassName" not in web


def test_a_gpu_operator_driver_and_other_imex_settings():
    values = {
        **VALUES,
        "agent": {
            "driverRoot": "/run/nvidia/driver",
            "runtimeClassName": "",
            "imex": {"graceTimeSeconds": 300, "logLevel": 2},
            "channels": {"mode": "0660", "group": "imex"},
        },
    }
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(values)}
    agent, runner = daemonsets(objects)
    for ds in (agent, runner):
        pod = ds["spec"]["template"]["spec"]
        assert "runtimeClassName" not in pod
        assert mounts(pod)["/driver-root"][0] == "/run/nvidia/driver"
        assert_valid_kubernetes(ds)
    (container,) = agent["spec"]["template"]["spec"]["containers"]
    assert {
        "--imex-grace-time=300",
        "--imex-log-level=2",
        "--channel-mode=0660",
        "--channel-group=imex",
    } <= set(container["args"])


def test_external_postgres_and_redis_come_from_the_secret(objects):
    secret = objects["Secret", "portal-domain-portal"]
    assert secret["stringData"]["DATABASE_URL"] == VALUES["databaseUrl"]
    assert secret["stringData"]["REDIS_URL"] == VALUES["redisUrl"]
    worker = objects["Deployment", "portal-domain-portal-worker"]["spec"]["template"]["spec"]
    env = {e["name"]: e for e in worker["containers"][0]["env"]}
    assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "portal-domain-portal"


def test_the_portals_log_level_is_one_value_for_web_workers_and_beat():
    """Celery's own --loglevel would change nothing (the processes log as the web does):
    LOG_LEVEL from `logLevel` is the one knob, and no container is given another."""
    rendered = {
        (o["kind"], o["metadata"]["name"]): o for o in render({**VALUES, "logLevel": "DEBUG"})
    }
    assert rendered["ConfigMap", "portal-domain-portal"]["data"]["LOG_LEVEL"] == "DEBUG"
    for name in ("web", "worker", "notifier", "beat"):
        spec = rendered["Deployment", f"portal-domain-portal-{name}"]["spec"]["template"]["spec"]
        container = spec["containers"][0]
        assert {"configMapRef": {"name": "portal-domain-portal"}} in container["envFrom"]
        assert not [a for a in container.get("args", []) if "loglevel" in str(a).lower()]


def test_rbac_allows_only_what_the_portal_does(objects):
    role = objects["ClusterRole", "portal-domain-portal"]
    rules = {
        (g, r): set(rule["verbs"])
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
    }
    assert rules == {
        ("", "nodes"): {"get", "list", "watch"},
        ("", "namespaces"): {"get", "list", "watch"},
        ("", "pods"): {"list", "watch"},  # what runs on each tray
        ("resource.nvidia.com", "computedomains"): {
            "get",
            "list",
            "watch",
            "create",
            "patch",
            "delete",
        },
        ("resource.nvidia.com", "computedomains/status"): {"get", "patch"},
        ("resource.k8s.io", "resourceclaimtemplates"): {"get", "create", "delete"},
        ("resource.k8s.io", "resourceclaims"): {"list"},
        # A lost tray's slice withdrawn (failover): domains/kube/sweep.py.
        ("resource.k8s.io", "resourceslices"): {"list", "delete"},
    }
    agent = objects["ClusterRole", "portal-domain-portal-agent"]
    assert {(r["resources"][0], tuple(r["verbs"])) for r in agent["rules"]} == {
        ("resourceclaims", ("get",)),
        ("resourceslices", ("get", "list", "watch", "create", "update", "delete")),
    }
    # The web's one call: a TokenReview of a joining agent's token.
    web_role = objects["ClusterRole", "portal-domain-portal-web"]
    assert web_role["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]
    binding = objects["ClusterRoleBinding", "portal-domain-portal-web"]
    assert binding["subjects"][0]["name"] == "portal-domain-portal-web"
    web = objects["Deployment", "portal-domain-portal-web"]["spec"]["template"]["spec"]
    assert web["automountServiceAccountToken"] is True


def test_agents_join_with_a_projected_token_bound_to_their_node(objects):
    agent, _ = daemonsets(objects)
    pod = agent["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    token_file = "--service-account-token-file=/var/run/secrets/domain-portal/token"
    assert token_file in container["args"] and "--hostname=$(NODE_NAME)" in container["args"]
    assert "NODEAGENT_JOIN_TOKEN" not in {e["name"] for e in container["env"]}
    (volume,) = [v for v in pod["volumes"] if v["name"] == "portal-token"]
    assert volume["projected"]["sources"] == [
        {"serviceAccountToken": {"audience": "domain-portal", "expirationSeconds": 3600,
                                 "path": "token"}}
    ]  # fmt: skip
    _, mount = mounts(pod)["/var/run/secrets/domain-portal"]
    assert mount["name"] == "portal-token" and mount["readOnly"] is True
    config = objects["ConfigMap", "portal-domain-portal"]["data"]
    assert config["PORTAL_AGENT_SERVICE_ACCOUNTS"] == "gpu-portal:portal-domain-portal-agent"
    assert config["PORTAL_AGENT_TOKEN_AUDIENCE"] == "domain-portal"
    # No shared secret is needed then.
    assert render({k: v for k, v in VALUES.items() if k != "agentJoinToken"})


def test_agents_can_still_join_with_the_join_token():
    values = {**VALUES, "agent": {"auth": {"method": "joinToken"}}}
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(values)}
    agent, _ = daemonsets(objects)
    pod = agent["spec"]["template"]["spec"]
    assert "NODEAGENT_JOIN_TOKEN" in {e["name"] for e in pod["containers"][0]["env"]}
    assert not any(v["name"] == "portal-token" for v in pod["volumes"])
    config = objects["ConfigMap", "portal-domain-portal"]["data"]
    assert "PORTAL_AGENT_SERVICE_ACCOUNTS" not in config
    web = objects["Deployment", "portal-domain-portal-web"]["spec"]["template"]["spec"]
    assert web["automountServiceAccountToken"] is False  # the web never calls the API then
    assert ("ClusterRole", "portal-domain-portal-web") not in objects
    with pytest.raises(Exception, match="agentJoinToken"):
        render({k: v for k, v in values.items() if k != "agentJoinToken"})


def test_missing_database_settings_are_named():
    values = {k: v for k, v in VALUES.items() if k not in ("databaseUrl", "redisUrl")}
    with pytest.raises(Exception, match="databaseUrl, redisUrl"):
        render(values)
    assert render({"existingSecret": "mine"})  # or bring your own Secret


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"web": {"replicas": "two"}}, "/web/replicas"),
        ({"databaseUrl": "mysql://db/portal"}, "/databaseUrl"),
        ({"agent": {"healthPort": 70000}}, "/agent/healthPort"),
        ({"agent": {"imex": {"logLevel": 7}}}, "/agent/imex/logLevel"),
        ({"logLevel": "LOUD"}, "/logLevel"),
        ({"agent": {"imex": {"graceTimeSeconds": -2}}}, "/agent/imex/graceTimeSeconds"),
        ({"agent": {"channels": {"mode": "0999"}}}, "/agent/channels/mode"),
        ({"agent": {"driverRoot": "run/nvidia/driver"}}, "/agent/driverRoot"),
        ({"agent": {"auth": {"method": "secret"}}}, "/agent/auth/method"),
        ({"agent": {"auth": {"tokenExpirationSeconds": 60}}}, "/agent/auth/tokenExpirationSeconds"),
    ],
)
def test_bad_values_are_refused_naming_the_field(values, field):
    with pytest.raises(Exception, match=field):
        render({**VALUES, **values})


@pytest.mark.parametrize(
    ("values", "where", "key"),
    [
        # would have mounted "/" as the driver root, silently
        ({"agent": {"driverroot": "/run/nvidia/driver"}}, "/agent", "driverroot"),
        ({"web": {"replica": 3}}, "/web", "replica"),
        ({"databaseURL": "postgres://db/portal"}, "", "databaseURL"),
        ({"monitoring": {"serviceMonitor": {"enable": True}}}, "/monitoring/serviceMonitor",
         "enable"),
        ({"agent": {"updateStrategy": {"rollingUpdate": {"maxUnavailble": 2}}}},
         "/agent/updateStrategy/rollingUpdate", "maxUnavailble"),
        ({"agent": {"runner": {"tolerations": [{"operator": "Exists", "efect": "NoExecute"}]}}},
         "/agent/runner/tolerations/0", "efect"),
        ({"worker": {"resources": {"request": {"cpu": "1"}}}}, "/worker/resources", "request"),
    ],
)  # fmt: skip
def test_a_typo_in_values_is_refused_naming_the_key(values, where, key):
    with pytest.raises(Exception, match=key) as refused:
        render({**VALUES, **values})
    assert where in str(refused.value) and "additional" in str(refused.value).lower()


def closed_levels(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, additionalProperties) of every object level with properties in the schema."""
    if isinstance(node, dict):
        if "properties" in node:
            yield path, node.get("additionalProperties")
            for name, child in node["properties"].items():
                yield from closed_levels(child, f"{path}/{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                yield from closed_levels(node[key], f"{path}/{key}")
        for name, child in node.get("definitions", {}).items():
            yield from closed_levels(child, f"#/definitions/{name}")


# Values that are Kubernetes objects or free maps: documented as one row, not key by key.
WHOLE = {"resources", "annotations", "labels", "nodeSelector", "tolerations", "affinity",
         "podSecurityContext", "extraEnv"}  # fmt: skip


def value_paths(values: dict[str, Any], prefix: str = "") -> Iterator[str]:
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and key not in WHOLE:
            yield from value_paths(value, f"{path}.")
        else:
            yield path


def test_every_value_is_in_the_operators_values_reference():
    manual = (CHART.parents[2] / "docs/operations.md").read_text()
    reference = manual[manual.index("## Values reference") :]
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    missing = [p for p in value_paths(defaults) if f"`{p}`" not in reference]
    assert missing == []
    assert "`agent.updateStrategy.rollingUpdate.maxUnavailable`" in reference


def test_the_values_schema_is_closed_at_every_level():
    schema = json.loads((CHART / "values.schema.json").read_text())
    levels = dict(closed_levels(schema))
    assert len(levels) > 20 and "#/definitions/toleration" in levels
    assert {path: closed for path, closed in levels.items() if closed is not False} == {}
    # and every key values.yaml sets is described there
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) <= set(schema["properties"])


def test_the_chart_installs_nvidias_crd_when_absent():
    chart = helm.Chart.load(CHART)
    (crd,) = chart.crds
    ours = yaml.safe_load(crd["data"])
    assert_valid_kubernetes(ours)
    assert ours["metadata"]["name"] == "computedomains.resource.nvidia.com"
    if CRD_PATH.exists():
        assert ours == yaml.safe_load(CRD_PATH.read_text())


def test_the_agent_is_the_trays_dra_plugin_with_the_portals_own_device_class(objects):
    agent, runner = daemonsets(objects)
    pod = agent["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--kubelet-dir=/var/lib/kubelet" in container["args"]
    assert pod["serviceAccountName"] == "portal-domain-portal-agent"
    assert "automountServiceAccountToken" not in pod  # it reads claims, owns its slice
    assert {
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins/imex-channel.portal.domains",
        "/var/run/cdi",
    } <= set(mounts(pod))
    assert runner["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    klass = objects["DeviceClass", "compute-domain-channel.portal.domains"]
    assert_valid_kubernetes(klass)
    # Rendered without a cluster, Helm's default capabilities give v1beta1 (1.32); on a
    # 1.34 cluster the same body is rendered as v1: both must be valid there.
    assert_valid_dra(klass)
    assert_valid_dra({**klass, "apiVersion": "resource.k8s.io/v1"})
    (selector,) = klass["spec"]["selectors"]
    assert selector["cel"]["expression"] == "device.driver == 'imex-channel.portal.domains'"
    assert "nvidia.com" not in str(klass)  # never NVIDIA's driver or class


def test_without_dra_the_agent_has_no_api_access_and_no_device_class():
    values = {**VALUES, "agent": {"dra": {"enabled": False}}}
    objects = {(o["kind"], o["metadata"]["name"]): o for o in render(values)}
    agent, _ = daemonsets(objects)
    pod = agent["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert not any(a.startswith("--kubelet-dir") for a in pod["containers"][0]["args"])
    assert not any(kind == "DeviceClass" for kind, _ in objects)


def test_an_agent_may_write_only_its_own_nodes_resourceslice(objects):
    """RBAC lets the agents' service account write any slice; an admission policy narrows
    it to the node in the agent's pod-bound token, as NVIDIA's chart does for its plugin."""
    name = "portal-domain-portal-agent-resourceslices"
    policy = objects["ValidatingAdmissionPolicy", name]
    binding = objects["ValidatingAdmissionPolicyBinding", name]
    assert_valid_kubernetes(policy)
    assert_valid_kubernetes(binding)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == (["resource.k8s.io"], ["resourceslices"])
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    (who,) = spec["matchConditions"]
    agent, _ = daemonsets(objects)
    account = agent["spec"]["template"]["spec"]["serviceAccountName"]
    assert who["expression"] == (
        f'request.userInfo.username == "system:serviceaccount:gpu-portal:{account}"'
    )
    variables = {v["name"]: v["expression"] for v in spec["variables"]}
    assert "authentication.kubernetes.io/node-name" in variables["agentNode"]
    checks = " ".join(v["expression"] for v in spec["validations"])
    assert "variables.slice.spec.?nodeName.orValue('') == variables.agentNode" in checks
    assert "oldObject.spec.?nodeName.orValue('') == variables.agentNode" in checks  # UPDATE
    assert f'spec.driver == "{DRIVER_NAME}"' in checks
    assert "variables.slice.spec.pool.name == variables.agentNode" in checks  # its own pool
    # The slice the agent publishes names its node and our driver, as the policy wants.
    published = slice_object(SliceFacts(node="gb-r01-t01", clique="", gpus=4), version="v1",
                             generation=1)  # fmt: skip
    assert published["spec"]["nodeName"] == "gb-r01-t01"
    assert published["spec"]["driver"] == DRIVER_NAME
    off = {**VALUES, "agent": {"dra": {"restrictSlicesToNode": False}}}
    kinds = {o["kind"] for o in render(off)}
    assert "ValidatingAdmissionPolicy" not in kinds and "DeviceClass" in kinds


def test_the_node_daemonsets_run_the_agent_image_when_given(objects):
    for ds in daemonsets(objects):
        assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == "domain-portal:0.1.0"
    values = {**VALUES, "agent": {"image": {"repository": "registry.example/portal-agent"}}}
    found = {(o["kind"], o["metadata"]["name"]): o for o in render(values)}
    for ds in daemonsets(found):
        image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image == "registry.example/portal-agent:0.1.0"
    web = found["Deployment", "portal-domain-portal-web"]["spec"]["template"]["spec"]
    assert web["containers"][0]["image"] == "domain-portal:0.1.0"
