"""The Helm chart (helm/kubetune) proven by installation on its own local cluster.

helm (built from its Go module by ``devcluster.build``) lints the chart; its
manifests, with default and non-default values, pass the real API server's
``kubectl apply --dry-run=server``; ``helm install`` installs the CRDs and the
operator, and the process kubelet runs the operator's pod from the chart's
Deployment under the chart's ServiceAccount, with its projected token as the
only credentials. An Experiment then runs to Succeeded in a namespace that
enforces the ``restricted`` Pod Security Standard, which proves the RBAC is
enough. ``helm upgrade`` (to namespaced RBAC) replaces the operator while a
trial runs and keeps the collector's key, so the trial keeps reporting;
``helm uninstall`` leaves no operator object behind.

The module runs its own cluster: the session cluster of ``conftest.py`` runs
another operator watching every namespace, and two operators would fight over
Experiments. There are no Service networks locally, so the chart's
``collector.url`` points trial pods at the operator's port on loopback.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import boto3
import pytest
import urllib3
import yaml
from kubernetes import client

from devcluster import Cluster, ClusterConfig, procs
from devcluster.cluster import S3_BUCKET
from devcluster.testkit import wait_for
from tests.integration.support import Helm, trial_prefix

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "kubetune"
RELEASE, SYSTEM = "kubetune", "kubetune-system"
TEAM, OTHER_TEAM = "team-a", "team-b"
OPERATOR = "kubetune-operator"  # Deployment, Service, ServiceAccount and roles of release "kubetune"
KEY_SECRET = "kubetune-collector-key"
METRICS_READER = "kubetune-metrics-reader"  # the ClusterRole users bind to read /metrics
SA_USER = f"system:serviceaccount:{SYSTEM}:{OPERATOR}"
GROUP, VERSION = "kubetune.io", "v1alpha1"
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"


@pytest.fixture(scope="module")
def own_cluster():
    """A cluster without CRDs (the chart installs them) and without an operator."""
    with Cluster(ClusterConfig(nodes=1, gpus_per_node=2)) as c:
        core = client.CoreV1Api(c.api_client())
        for ns in (SYSTEM, TEAM, OTHER_TEAM):
            core.create_namespace({"metadata": {"name": ns, "labels": RESTRICTED}})
        yield c


@pytest.fixture(scope="module")
def core(own_cluster):
    return client.CoreV1Api(own_cluster.api_client())


@pytest.fixture(scope="module")
def custom(own_cluster):
    return client.CustomObjectsApi(own_cluster.api_client())


@pytest.fixture(scope="module")
def helm(own_cluster, tmp_path_factory):
    return Helm(own_cluster, tmp_path_factory.mktemp("helm"))


@pytest.fixture(scope="module")
def local_values(tmp_path_factory):
    """Values for this cluster: free host ports (pods share the host's network) and a loopback collector URL."""
    port, probe = procs.free_port(), procs.free_port()
    values = {
        "collector": {"port": port, "url": f"http://127.0.0.1:{port}"},
        "probePort": probe,
        "statusWriteIntervalSeconds": 0.5,
        "trials": {"terminationGracePeriodSeconds": 20},
    }
    path = tmp_path_factory.mktemp("values") / "local.yaml"
    path.write_text(yaml.safe_dump(values))
    return path, values


NON_DEFAULT = {
    "image": {"repository": "registry.example.com/ml/kubetune-operator", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "regcred"}],
    "fullnameOverride": "tuner",
    "watchNamespaces": [TEAM, OTHER_TEAM],
    "serviceAccount": {"create": True, "name": "tuner-sa", "annotations": {"example.com/role": "tuner"}},
    "collector": {
        "port": 9000,
        "url": "http://tuner.example.internal:9000",
        "keySecret": {"name": "tuner-key", "create": False},
    },
    "probePort": 9001,
    "service": {"type": "NodePort", "annotations": {"example.com/scrape": "true"}},
    "metrics": {"auth": "none"},
    "trials": {
        "image": {"repository": "registry.example.com/ml/trainer", "tag": "2024.1"},
        "maxConcurrentTrials": 4,
        "terminationGracePeriodSeconds": 120,
        "runAsUser": 4242,
    },
    "storage": {"uri": "s3://ml-bucket/tuning", "endpoint": "https://minio.example.internal", "region": "eu-west-1"},
    "statusWriteIntervalSeconds": 5,
    "verbose": True,
    "extraEnv": [{"name": "KUBETUNE_OPERATOR_COLLECTOR_MAX_RESULTS_PER_BATCH", "value": "500"}],
    "resources": {"requests": {"cpu": "200m", "memory": "300Mi"}, "limits": {"memory": "1Gi"}},
    "podAnnotations": {"example.com/team": "ml"},
    "podLabels": {"example.com/tier": "control"},
    "priorityClassName": "",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]},
                }
            ]
        }
    },
}


def can(cluster, user: str, *args: str) -> str:
    """``kubectl auth can-i ARGS --as USER``: what the API server answers, "yes" or "no"."""
    return cluster.kubectl("auth", "can-i", *args, "--as", user, check=False).stdout.strip()


def render(helm, *extra: str) -> list[dict]:
    out = helm.run("template", RELEASE, str(CHART), "-n", SYSTEM, *extra).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def by_kind(docs: list[dict]) -> dict[tuple[str, str, str], dict]:
    return {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]): d for d in docs}


def test_chart_lints_strictly(helm, local_values, tmp_path):
    assert "1 chart(s) linted, 0 chart(s) failed" in helm.run("lint", "--strict", str(CHART)).stdout
    values = tmp_path / "non-default.yaml"
    values.write_text(yaml.safe_dump(NON_DEFAULT))
    helm.run("lint", "--strict", str(CHART), "-f", str(values))
    helm.run("lint", "--strict", str(CHART), "-f", str(local_values[0]))


def test_rendered_manifests_pass_the_api_servers_dry_run(own_cluster, helm, tmp_path):
    started = time.monotonic()
    default = helm.run("template", RELEASE, str(CHART), "-n", SYSTEM, "--include-crds").stdout
    applied = own_cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=default).stdout
    for line in (
        "customresourcedefinition.apiextensions.k8s.io/experiments.kubetune.io created",
        f"deployment.apps/{OPERATOR} created",
        f"clusterrole.rbac.authorization.k8s.io/{OPERATOR} created",
        f"secret/{KEY_SECRET} created",
        f"service/{OPERATOR} created",
        f"serviceaccount/{OPERATOR} created",
        f"role.rbac.authorization.k8s.io/{OPERATOR}-key created",
    ):
        assert line + " (server dry run)" in applied, applied
    values = tmp_path / "non-default.yaml"
    values.write_text(yaml.safe_dump(NON_DEFAULT))
    custom_out = helm.run("template", RELEASE, str(CHART), "-n", SYSTEM, "-f", str(values)).stdout
    applied = own_cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=custom_out).stdout
    assert "deployment.apps/tuner-operator created (server dry run)" in applied, applied
    print(f"\n[helm] template + server dry-run of both value sets: {time.monotonic() - started:.1f} s")

    docs = by_kind([d for d in yaml.safe_load_all(custom_out) if d])
    # namespaced RBAC: a Role in each watched namespace, no cluster-wide access to workloads
    for ns in (TEAM, OTHER_TEAM):
        assert ("Role", ns, "tuner-operator") in docs and ("RoleBinding", ns, "tuner-operator") in docs
    assert ("ClusterRole", "", "tuner-operator") not in docs
    observer = docs[("ClusterRole", "", "tuner-operator-observer")]
    assert {r["resources"][0] for r in observer["rules"]} == {"customresourcedefinitions", "namespaces"}
    assert all(set(r["verbs"]) == {"list", "watch"} for r in observer["rules"])
    # keySecret.create=false: no Secret rendered, the operator may create it
    assert not [k for k in docs if k[0] == "Secret"]
    key_rules = docs[("Role", SYSTEM, "tuner-operator-key")]["rules"]
    assert {"resourceNames": ["tuner-key"], "verbs": ["get"]}.items() <= key_rules[0].items()
    assert key_rules[1]["verbs"] == ["create"] and "resourceNames" not in key_rules[1]
    pod = docs[("Deployment", SYSTEM, "tuner-operator")]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBETUNE_OPERATOR_WATCH_NAMESPACES"] == f"{TEAM},{OTHER_TEAM}"
    assert env["KUBETUNE_OPERATOR_COLLECTOR_URL"] == "http://tuner.example.internal:9000"
    assert env["KUBETUNE_OPERATOR_COLLECTOR_KEY_SECRET_NAME"] == "tuner-key"
    assert env["KUBETUNE_OPERATOR_TRIALS_DEFAULT_IMAGE"] == "registry.example.com/ml/trainer:2024.1"
    assert env["KUBETUNE_OPERATOR_TRIALS_RUN_AS_USER"] == "4242"
    assert env["KUBETUNE_OPERATOR_STORAGE_DEFAULT_URI"] == "s3://ml-bucket/tuning"
    assert env["KUBETUNE_OPERATOR_COLLECTOR_MAX_RESULTS_PER_BATCH"] == "500"
    assert container["image"] == "registry.example.com/ml/kubetune-operator:0.1.0-rc1"
    assert container["command"][-2:] == ["http://0.0.0.0:9001/healthz", "--verbose"]
    assert pod["spec"]["serviceAccountName"] == "tuner-sa"
    assert env["KUBETUNE_OPERATOR_METRICS_AUTH"] == "none" and not [k for k in docs if "metrics" in k[2]]
    assert pod["metadata"]["labels"]["example.com/tier"] == "control"

    default_docs = by_kind([d for d in yaml.safe_load_all(default) if d])
    env = {
        e["name"]: e.get("value")
        for e in default_docs[("Deployment", SYSTEM, OPERATOR)]["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["KUBETUNE_OPERATOR_COLLECTOR_URL"] == f"http://{OPERATOR}.{SYSTEM}.svc:8080"
    assert env["KUBETUNE_OPERATOR_TRIALS_DEFAULT_IMAGE"] == "kubetune/runtime:0.1.0"
    assert env["KUBETUNE_OPERATOR_METRICS_AUTH"] == "kubernetes"
    reviews = default_docs[("ClusterRole", "", f"{OPERATOR}-metrics-auth")]["rules"]
    assert sorted((r["apiGroups"][0], r["resources"][0], r["verbs"][0]) for r in reviews) == [
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    ]
    assert default_docs[("ClusterRole", "", METRICS_READER)]["rules"] == [
        {"nonResourceURLs": ["/metrics"], "verbs": ["get"]}
    ]


def test_the_dashboard_is_opt_in_read_only_restricted_and_in_cluster_only(own_cluster, helm, tmp_path):
    """dashboard.enabled: a Deployment of `kubetune dashboard` (no name) listening on every address of its pod, its
    own ServiceAccount with `list` on Experiments, Trials and Events only (pods' logs with dashboard.podLogs), a
    ClusterIP Service, and a pod the API server admits in a namespace that enforces the restricted Pod Security
    Standard."""
    name = "kubetune-dashboard"
    assert not [d for d in render(helm) if "dashboard" in d["metadata"]["name"]]  # off by default
    on = ("--set", "dashboard.enabled=true", "--set", "dashboard.storageCredentialsSecret=s3-creds")
    out = helm.run("template", RELEASE, str(CHART), "-n", SYSTEM, *on).stdout
    applied = own_cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=out).stdout
    for line in (
        f"deployment.apps/{name} created",
        f"service/{name} created",
        f"serviceaccount/{name} created",
        f"clusterrole.rbac.authorization.k8s.io/{name} created",
        f"clusterrolebinding.rbac.authorization.k8s.io/{name} created",
    ):
        assert line + " (server dry run)" in applied, applied
    docs = by_kind([d for d in yaml.safe_load_all(out) if d])
    assert docs[("ClusterRole", "", name)]["rules"] == [
        {"apiGroups": [GROUP], "resources": ["experiments", "trials"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    ]
    assert docs[("ClusterRoleBinding", "", name)]["subjects"] == [
        {"kind": "ServiceAccount", "name": name, "namespace": SYSTEM}
    ]
    service = docs[("Service", SYSTEM, name)]["spec"]
    assert service["type"] == "ClusterIP" and not [k for k in docs if k[0] == "Ingress"]
    pod = docs[("Deployment", SYSTEM, name)]["spec"]["template"]
    assert service["selector"].items() <= pod["metadata"]["labels"].items()
    operator_selector = docs[("Service", SYSTEM, OPERATOR)]["spec"]["selector"]
    assert not operator_selector.items() <= pod["metadata"]["labels"].items()  # the collector's Service: not this pod
    container = pod["spec"]["containers"][0]
    assert container["command"] == [
        "kubetune", "dashboard", "--no-browser", "--host", "0.0.0.0", "--port", "8080", "--refresh", "5"
    ]  # fmt: skip
    assert container["image"] == "kubetune/operator:0.1.0" and pod["spec"]["serviceAccountName"] == name
    assert container["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert (
        container["livenessProbe"]["httpGet"]
        == container["readinessProbe"]["httpGet"]
        == {
            "path": "/api/meta",
            "port": "http",
        }
    )
    as_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "dashboard-psa", "namespace": TEAM},
        "spec": {**pod["spec"], "serviceAccountName": "default"},
    }
    admitted = own_cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(as_pod)).stdout
    assert "pod/dashboard-psa created (server dry run)" in admitted  # TEAM enforces restricted

    # dashboard.podLogs (off by default) and dashboard.events, as the API server grants them
    logs = ("--set", "dashboard.enabled=true", "--set", "dashboard.podLogs=true", "--set", "dashboard.events=false")
    rbac = [
        d
        for d in render(helm, *logs)
        if d["kind"] in ("ClusterRole", "ClusterRoleBinding") and d["metadata"]["name"] == name
    ]
    own_cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac}))
    try:
        user = f"system:serviceaccount:{SYSTEM}:{name}"
        assert can(own_cluster, user, "get", "pods", "--subresource=log", "-n", TEAM) == "yes"
        assert can(own_cluster, user, "list", "events", "-n", TEAM) == "no"
        assert can(own_cluster, user, "get", "pods", "-n", TEAM) == "no"
        assert can(own_cluster, user, "get", "secrets", "-n", TEAM) == "no"
    finally:
        own_cluster.kubectl("delete", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": rbac}))

    values = tmp_path / "dashboard.yaml"
    values.write_text(yaml.safe_dump({"dashboard": {"enabled": True}, "watchNamespaces": [TEAM, OTHER_TEAM]}))
    namespaced = by_kind(render(helm, "-f", str(values)))
    assert ("ClusterRole", "", name) not in namespaced
    for ns in (TEAM, OTHER_TEAM):
        assert namespaced[("Role", ns, name)]["rules"][0]["verbs"] == ["list"]
        assert namespaced[("RoleBinding", ns, name)]["roleRef"]["kind"] == "Role"
    command = namespaced[("Deployment", SYSTEM, name)]["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[-4:] == ["--namespace", TEAM, "--namespace", OTHER_TEAM]


def test_katibs_api_is_opt_in_and_refused_where_another_installation_owns_katibs_crds(own_cluster, helm):
    """katib.enabled installs Katib's CRDs (kept on uninstall) with the operator's rights on Katib's kinds; where a CRD
    of that name exists that no release of this chart installed (Katib's manifests), the chart refuses, saying so."""
    assert not [d for d in render(helm) if "kubeflow.org" in json.dumps(d)]  # off by default
    on = render(helm, "--set", "katib.enabled=true")
    crds = {d["metadata"]["name"]: d for d in on if d["kind"] == "CustomResourceDefinition"}
    assert sorted(crds) == ["experiments.kubeflow.org", "trials.kubeflow.org"]
    assert all(d["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep" for d in crds.values())
    env = {e["name"]: e.get("value") for e in on_deployment(on)["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["KUBETUNE_OPERATOR_KATIB_ENABLED"] == "true"
    rules = [r for d in on if d["kind"] == "ClusterRole" for r in d.get("rules") or ()]
    assert {"apiGroups": ["kubeflow.org"], "resources": ["trials"], "verbs": ["list", "create"]} in rules
    katib_crd = copy.deepcopy(crds["experiments.kubeflow.org"])  # as Katib's own manifests would install it
    del katib_crd["metadata"]["annotations"]
    ext = client.ApiextensionsV1Api(own_cluster.api_client())
    ext.create_custom_resource_definition(katib_crd)
    try:
        proc = helm.run(
            "install",
            "katib-check",
            str(CHART),
            "-n",
            SYSTEM,
            "--set",
            "katib.enabled=true",
            "--dry-run=server",
            check=False,
        )
        assert proc.returncode != 0, proc.stdout[-500:]
        assert "katib.enabled: the CRD experiments.kubeflow.org belongs to another installation" in proc.stderr
        assert "not installed by Helm" in proc.stderr
    finally:
        ext.delete_custom_resource_definition("experiments.kubeflow.org")


def on_deployment(docs: list[dict]) -> dict:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == OPERATOR]
    return deployment


def test_values_outside_the_schema_are_refused(helm):
    for bad in (
        "image.pullPolicy=Sometimes",
        "collector.port=70000",
        "storage.uri=gs://bucket",
        "watchNamespaces[0]=Not_A_Namespace",
        "imageTag=1.0",
        "metrics.auth=open",
    ):
        proc = helm.run("template", RELEASE, str(CHART), "--set", bad, check=False)
        assert proc.returncode != 0 and "schema" in proc.stderr, (bad, proc.stderr)


def operator_pods(core) -> list:
    return [
        p
        for p in core.list_namespaced_pod(SYSTEM, label_selector=INSTANCE).items
        if p.metadata.deletion_timestamp is None
    ]


def running_operator(core, port: int):
    """The operator pod once it runs and its collector answers."""

    def ready():
        pods = [p for p in operator_pods(core) if p.status.phase == "Running"]
        return pods[0] if len(pods) == 1 and procs.http_ok(f"http://127.0.0.1:{port}/healthz") else None

    return wait_for(lambda: _quiet(ready), timeout=90, what="the operator pod to run and its collector to answer")


def _quiet(fn):
    try:
        return fn()
    except OSError:
        return None


def operator_logs(cluster) -> str:
    return "\n".join(
        p.read_text(errors="replace") for p in (cluster.pod_log_dir()).glob(f"{SYSTEM}_{OPERATOR}-*/*.log")
    )


def assert_no_forbidden(cluster) -> None:
    """No API call of any operator pod was refused (RBAC missing a verb the operator uses)."""
    logs = operator_logs(cluster)
    assert "forbidden" not in logs.lower(), logs[-3000:]


def experiment(name, cluster, **spec):
    body = {
        "trainable": {"entrypoint": "tests.integration.trainables:Counter"},
        "config": {"x": 1},
        "metric": "score",
        "mode": "max",
        "stop": {"training_iteration": 3},
        "checkpoint": {"frequency": 1},
        "storage": {
            "uri": f"s3://{S3_BUCKET}/helm",
            "endpoint": cluster.s3_endpoint,
            "region": "us-east-1",
            "credentialsSecret": "s3-creds",
        },
    }
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Experiment", "metadata": {"name": name}, "spec": body}


def exp_status(custom, name) -> dict:
    return custom.get_namespaced_custom_object(GROUP, VERSION, TEAM, "experiments", name).get("status") or {}


def trial_status(custom, name) -> dict:
    """The Trial's status; empty while the Trial does not exist yet."""
    try:
        return custom.get_namespaced_custom_object(GROUP, VERSION, TEAM, "trials", name).get("status") or {}
    except client.ApiException as exc:
        if exc.status == 404:
            return {}
        raise


@pytest.fixture(scope="module")
def release(own_cluster, core, helm, local_values):
    """The chart installed with the local values; yields ``(helm install's output, seconds it took)``."""
    env = own_cluster.env()
    core.create_namespaced_secret(
        TEAM,
        {
            "metadata": {"name": "s3-creds"},
            "stringData": {
                "AWS_ACCESS_KEY_ID": env["AWS_ACCESS_KEY_ID"],
                "AWS_SECRET_ACCESS_KEY": env["AWS_SECRET_ACCESS_KEY"],
            },
        },
    )
    started = time.monotonic()
    out = helm.run(
        "install", RELEASE, str(CHART), "-n", SYSTEM, "-f", str(local_values[0]), "--wait", "--timeout", "120s"
    ).stdout
    return out, time.monotonic() - started


def test_install_runs_an_experiment_with_the_charts_service_account(own_cluster, core, custom, release, local_values):
    out, seconds = release
    print(f"\n[helm] install --wait: {seconds:.1f} s")
    assert "STATUS: deployed" in out and f"rollout status deployment/{OPERATOR}" in out  # NOTES.txt
    port = local_values[1]["collector"]["port"]
    pod = running_operator(core, port)
    assert pod.spec.service_account_name == OPERATOR
    token_volumes = [
        v for v in pod.spec.volumes if v.projected and any(s.service_account_token for s in v.projected.sources)
    ]
    assert len(token_volumes) == 1  # the ServiceAccount admission plugin's projected token

    # The pod's credentials are the ServiceAccount's token, and nothing else.
    token = (
        own_cluster.pod_log_dir() / f"{SYSTEM}_{pod.metadata.name}" / "volumes" / token_volumes[0].name / "token"
    ).read_text()
    cfg = client.Configuration(host=own_cluster.api_url)
    cfg.ssl_ca_cert, cfg.api_key = str(own_cluster.pki["ca.crt"]), {"authorization": f"Bearer {token}"}
    review = client.AuthenticationV1Api(client.ApiClient(cfg)).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    assert review.status.user_info.username == SA_USER
    pid = int(pod.status.container_statuses[0].container_id.removeprefix("process://"))
    environ = dict(item.split("=", 1) for item in Path(f"/proc/{pid}/environ").read_text().split("\0") if "=" in item)
    assert "KUBECONFIG" not in environ and environ["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert environ["KUBERNETES_SERVICE_PORT"] == str(own_cluster.state["ports"]["apiserver"])

    # Least privilege: the operator may run trials but cannot read users' Secrets.
    assert can(own_cluster, SA_USER, "create", "pods", "-n", TEAM) == "yes"
    assert can(own_cluster, SA_USER, "patch", "trials.kubetune.io", "--subresource=status", "-n", TEAM) == "yes"
    assert can(own_cluster, SA_USER, "get", "secrets", "-n", TEAM) == "no"
    assert can(own_cluster, SA_USER, "get", f"secrets/{KEY_SECRET}", "-n", SYSTEM) == "yes"
    assert can(own_cluster, SA_USER, "get", "secrets/other", "-n", SYSTEM) == "no"
    assert can(own_cluster, SA_USER, "update", "experiments.kubetune.io", "-n", TEAM) == "no"

    started = time.monotonic()
    proof = experiment("proof", own_cluster)
    proof["spec"]["podRetentionPolicy"] = {"whenSucceeded": "Retain"}  # kept to be looked at below
    custom.create_namespaced_custom_object(GROUP, VERSION, TEAM, "experiments", proof)
    wait_for(
        lambda: exp_status(custom, "proof").get("phase") in ("Succeeded", "Failed"),
        timeout=90,
        what="the experiment to finish",
    )
    print(f"[helm] experiment through the installed operator: {time.monotonic() - started:.1f} s")
    status = exp_status(custom, "proof")
    assert status["phase"] == "Succeeded", status
    assert status["bestTrial"]["metricValue"] == 3.0 and status["bestTrial"]["iteration"] == 3
    # the trial pod was admitted under the "restricted" Pod Security Standard, from the chart's default image
    trial_pod = core.read_namespaced_pod("proof-00000-0", TEAM)
    assert trial_pod.spec.containers[0].image == "kubetune/runtime:0.1.0"
    assert trial_pod.spec.automount_service_account_token is False
    # its token Secret was deleted with the chart's RBAC once the attempt ended
    wait_for(
        lambda: (
            not [s for s in core.list_namespaced_secret(TEAM).items if s.metadata.name.startswith("proof-00000-0-")]
        ),
        timeout=30,
        what="the attempt's token Secret to be deleted",
    )
    with pytest.raises(client.ApiException) as refused:  # the namespace does enforce "restricted"
        core.create_namespaced_pod(
            TEAM,
            {
                "metadata": {"name": "privileged"},
                "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["true"]}]},
            },
        )
    assert refused.value.status == 403 and "violates PodSecurity" in refused.value.body
    assert_no_forbidden(own_cluster)


def test_metrics_answer_only_tokens_of_users_bound_to_the_metrics_reader_role(own_cluster, core, release, local_values):
    url = f"http://127.0.0.1:{local_values[1]['collector']['port']}/metrics"
    running_operator(core, local_values[1]["collector"]["port"])
    rbac = client.RbacAuthorizationV1Api(own_cluster.api_client())
    tokens = {}
    for name in ("scraper", "stranger"):
        core.create_namespaced_service_account(TEAM, {"metadata": {"name": name}})
        tokens[name] = core.create_namespaced_service_account_token(
            name, TEAM, {"spec": {"expirationSeconds": 600}}
        ).status.token
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": "scraper-metrics"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER},
            "subjects": [{"kind": "ServiceAccount", "name": "scraper", "namespace": TEAM}],
        }
    )

    def get(token=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        started = time.monotonic()
        resp = urllib3.request("GET", url, headers=headers, retries=False)
        return resp.status, resp.data.decode(), time.monotonic() - started

    status, body, first = get(tokens["scraper"])
    assert status == 200 and "kubetune_results_total" in body, (status, body[:300])
    _, _, cached = get(tokens["scraper"])
    print(f"\n[helm] /metrics with a reader's token: {first * 1000:.1f} ms reviewed, {cached * 1000:.1f} ms cached")
    status, body, _ = get(tokens["stranger"])
    assert status == 403 and f"system:serviceaccount:{TEAM}:stranger" in body, (status, body)
    assert get()[:2] == (401, "Unauthorized: a bearer token is required\n")
    assert get("not-a-token")[0] == 401
    assert urllib3.request("GET", url.replace("/metrics", "/healthz")).status == 200  # the probe needs no token
    assert_no_forbidden(own_cluster)  # the chart lets the operator create both reviews


def test_upgrade_keeps_the_key_and_running_trials_keep_reporting(
    own_cluster, core, custom, helm, release, local_values
):
    port = local_values[1]["collector"]["port"]
    old_pod = running_operator(core, port)
    key = core.read_namespaced_secret(KEY_SECRET, SYSTEM).data["hmac-key"]
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        TEAM,
        "experiments",
        experiment("across", own_cluster, config={"x": 1, "sleep": 0.5}, stop={"training_iteration": 80}),
    )
    wait_for(
        lambda: (trial_status(custom, "across-00000").get("iteration") or 0) >= 2,
        timeout=60,
        what="the trial to report before the upgrade",
    )

    started = time.monotonic()  # to namespaced RBAC: the operator pod is replaced (Recreate)
    out = helm.run(
        "upgrade",
        RELEASE,
        str(CHART),
        "-n",
        SYSTEM,
        "-f",
        str(local_values[0]),
        "--set",
        f"watchNamespaces={{{TEAM}}}",
        "--wait",
        "--timeout",
        "120s",
    ).stdout
    assert f"It runs Experiments in these namespaces only: {TEAM}." in out  # NOTES.txt
    new_pod = running_operator(core, port)
    print(f"\n[helm] upgrade --wait, until the new operator answers: {time.monotonic() - started:.1f} s")
    assert new_pod.metadata.uid != old_pod.metadata.uid
    assert core.read_namespaced_secret(KEY_SECRET, SYSTEM).data["hmac-key"] == key
    rbac = client.RbacAuthorizationV1Api(own_cluster.api_client())
    assert not rbac.list_cluster_role(label_selector=INSTANCE, field_selector=f"metadata.name={OPERATOR}").items
    assert rbac.read_namespaced_role(OPERATOR, TEAM).rules

    # The same pod reports to the new operator: its status moves on while attempt 0 still runs.
    seen = trial_status(custom, "across-00000").get("iteration") or 0
    assert core.read_namespaced_pod("across-00000-0", TEAM).status.phase == "Running"
    wait_for(
        lambda: (trial_status(custom, "across-00000").get("iteration") or 0) > seen + 2,
        timeout=60,
        what="results to reach the new operator",
    )
    wait_for(
        lambda: exp_status(custom, "across").get("phase") in ("Succeeded", "Failed"),
        timeout=90,
        what="the experiment to finish after the upgrade",
    )
    trial = trial_status(custom, "across-00000")
    assert exp_status(custom, "across")["phase"] == "Succeeded"
    assert trial["phase"] == "Succeeded" and trial["attempt"] == 0 and not trial.get("failures")
    assert trial["iteration"] == 80
    env = own_cluster.env()
    s3 = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL_S3"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
    )
    prefix = trial_prefix(s3, S3_BUCKET, "helm", TEAM, "across", "across-00000")
    body = s3.get_object(Bucket=S3_BUCKET, Key=f"{prefix}/result.json")["Body"].read()
    assert [json.loads(line)["training_iteration"] for line in body.splitlines()] == list(range(1, 81))
    trial_log = (own_cluster.pod_log_dir() / f"{TEAM}_across-00000-0" / "trial.log").read_text(errors="replace")
    assert "collector rejected" not in trial_log, trial_log[-3000:]  # no batch refused (401: another key)
    assert_no_forbidden(own_cluster)


def test_uninstall_leaves_no_operator_objects(own_cluster, core, custom, helm, release, local_values):
    started = time.monotonic()
    helm.run("uninstall", RELEASE, "-n", SYSTEM, "--wait", "--timeout", "120s")
    wait_for(lambda: not core.list_namespaced_pod(SYSTEM).items, timeout=60, what="the operator pod to go")
    print(f"\n[helm] uninstall --wait, until the operator pod is gone: {time.monotonic() - started:.1f} s")
    left = own_cluster.kubectl(
        "get",
        "deployments,replicasets,pods,services,serviceaccounts,secrets,configmaps,roles,rolebindings",
        "-A",
        "-l",
        INSTANCE,
        "-o",
        "name",
    ).stdout
    left += own_cluster.kubectl("get", "clusterroles,clusterrolebindings", "-l", INSTANCE, "-o", "name").stdout
    assert left.strip() == ""
    assert not [
        s.metadata.name for s in core.list_namespaced_secret(SYSTEM).items if s.metadata.name.startswith(RELEASE)
    ]
    assert not _quiet(lambda: procs.http_ok(f"http://127.0.0.1:{local_values[1]['collector']['port']}/healthz"))
    # Helm keeps CRDs (and so the users' Experiments); none of them is held by an operator finalizer.
    for exp in custom.list_namespaced_custom_object(GROUP, VERSION, TEAM, "experiments")["items"]:
        assert not exp["metadata"].get("finalizers"), exp["metadata"]
