"""TPUs on Compute Engine through the real compute_v1 clients (REST) against the Compute fake: a single-host
instance, a 4-host TPU7x slice (policy -> template -> group) with ranks from `agent-worker-number`, deletion in
reverse order, preemption, a broken slice, and the refusals (allowlist, quota, capacity) as one line each."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from tests.fakes.compute import ComputeFake, ComputeModel, FakeInstance
from tests.fakes.compute_tpus import TpuComputeModel, TpuComputeRoutes
from tpuops import catalog
from tpuops.cloud.base import VmRequest
from tpuops.cloud.compute_tpu import TpuVmRequest
from tpuops.cloud.gcp.clients import COMPUTE_ENDPOINT, Endpoints, compute_clients, compute_tpu_clients
from tpuops.cloud.gcp.compute import ComputeApi
from tpuops.cloud.gcp.compute_tpus import ComputeTpusApi
from tpuops.cloud.gcp.waiting import Timing
from tpuops.errors import CapacityError, PermissionDenied, QuotaError

PROJECT = "tpuops-test"
ZONE = "us-central1-c"
LABELS = {"tpuops-cluster": "ironwood"}


class Rig:
    def __init__(self) -> None:
        from google.auth.credentials import AnonymousCredentials

        self.compute = ComputeModel(PROJECT)
        self.fake = ComputeFake(self.compute)
        self.tpus = TpuComputeModel(self.compute)
        TpuComputeRoutes(self.fake, self.tpus)
        self.fake.server.start()
        endpoints = Endpoints.from_env({COMPUTE_ENDPOINT: self.fake.server.url + "/compute/v1/"})
        timing = Timing(poll_interval=0.01, operation_timeout=20, retry_initial=0.01)
        self.api = ComputeTpusApi(lambda: compute_tpu_clients(endpoints, AnonymousCredentials()), PROJECT, timing)

    def paths(self, method: str) -> list[str]:
        return [r.path.split(f"/projects/{PROJECT}/", 1)[1] for r in self.fake.server.requests if r.method == method]


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    try:
        yield made
    finally:
        made.fake.server.stop()


def request_for(accelerator: str, name: str = "ironwood", **changes: object) -> TpuVmRequest:
    shape = catalog.load().compute_shape(accelerator)
    assert shape is not None
    request = TpuVmRequest(name=name, zone=ZONE, accelerator_type=accelerator, machine_type=shape.machine_type,
                           hosts=shape.hosts, image_project=shape.image_project, image_family=shape.image_family,
                           boot_disk_type=shape.boot_disk_type, boot_disk_gb=shape.boot_disk_gb,
                           topology=shape.topology, labels=LABELS, ssh_keys="me:ssh-ed25519 AAAA me")
    return replace(request, **changes)  # type: ignore[arg-type]


def test_single_host_instance_carries_what_a_tpu_vm_needs(rig: Rig) -> None:
    made = rig.api.create_tpu_vm(request_for("v6e-8", name="trillium", provisioning="spot"))
    assert (made.state, made.machine_type, [h.rank for h in made.hosts]) == ("READY", "ct6e-standard-8t", [0])
    inserted = rig.fake.server.calls("POST", r"/zones/us-central1-c/instances$")[0].body
    assert inserted["scheduling"] == {"onHostMaintenance": "TERMINATE", "provisioningModel": "SPOT",
                                      "instanceTerminationAction": "STOP"}
    disk = inserted["disks"][0]["initializeParams"]
    assert disk["sourceImage"].endswith("ubuntu-os-accelerator-images/global/images/family/"
                                        "ubuntu-accel-2204-amd64-tpu-v5e-v5p-v6e")
    assert disk["diskType"].endswith("/diskTypes/hyperdisk-balanced") and disk["diskSizeGb"] == "100"
    metadata = {item["key"]: item["value"] for item in inserted["metadata"]["items"]}
    assert metadata["enable-guest-attributes"] == "TRUE" and metadata["ssh-keys"].startswith("me:")
    assert inserted["serviceAccounts"][0]["scopes"] == ["https://www.googleapis.com/auth/cloud-platform"]
    assert not rig.tpus.groups and not rig.tpus.templates and not rig.tpus.policies  # one host: no group
    [key] = rig.api.host_keys(ZONE, "trillium")
    assert (key.worker, key.key_type) == (0, "ssh-ed25519")


def test_single_host_without_rank_metadata_is_rank_zero(rig: Rig) -> None:
    rig.tpus.single_host_metadata = False  # whether Google writes it there is unconfirmed: both must work
    made = rig.api.create_tpu_vm(request_for("tpu7x-8"))
    assert (made.state, [h.rank for h in made.hosts]) == ("READY", [0])


def test_four_host_slice_ranks_come_from_metadata_not_names(rig: Rig) -> None:
    made = rig.api.create_tpu_vm(request_for("tpu7x-32", provisioning="spot"))
    assert (made.state, made.expected_hosts, made.topology_state) == ("READY", 4, "ACTIVE")
    assert [h.rank for h in made.hosts] == [0, 1, 2, 3]
    by_name = sorted(made.hosts, key=lambda h: h.instance)
    assert [h.rank for h in by_name] != [0, 1, 2, 3]  # the fake's names are shuffled against the ranks
    for host in made.hosts:
        assert host.internal_ip == f"10.140.1.{10 + host.rank}"
    created = [p for p in rig.paths("POST") if not p.endswith(("/wait", "/listManagedInstances"))]
    assert created == ["regions/us-central1/resourcePolicies", "global/instanceTemplates",
                       "zones/us-central1-c/instanceGroupManagers"]
    policy = rig.fake.server.calls("POST", r"/resourcePolicies$")[0].body
    assert policy["workloadPolicy"] == {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x4"}
    group = rig.fake.server.calls("POST", r"/instanceGroupManagers$")[0].body
    assert group["targetSize"] == 4 and group["targetSizePolicy"] == {"mode": "BULK"}
    assert group["instanceLifecyclePolicy"] == {"defaultActionOnFailure": "DO_NOTHING"}
    assert group["resourcePolicies"]["workloadPolicy"].endswith("/regions/us-central1/resourcePolicies/ironwood-wp")
    template = rig.fake.server.calls("POST", r"/instanceTemplates$")[0].body["properties"]
    assert template["machineType"] == "tpu7x-standard-4t" and template["labels"]["tpuops-cluster"] == "ironwood"
    keys = rig.api.host_keys(ZONE, "ironwood")
    assert sorted(k.worker for k in keys) == [0, 1, 2, 3]
    assert [s.name for s in rig.api.find_tpu_vms(LABELS, [ZONE])] == ["ironwood"]
    assert [s.name for s in rig.api.find_tpu_vms(LABELS)] == ["ironwood"]  # every zone, by the VMs' labels


def test_delete_goes_in_reverse_order_and_twice_is_no_error(rig: Rig) -> None:
    rig.api.create_tpu_vm(request_for("tpu7x-16"))
    rig.fake.server.requests.clear()
    rig.api.delete_tpu_vm(ZONE, "ironwood")
    deleted = rig.paths("DELETE")
    assert deleted == ["zones/us-central1-c/instanceGroupManagers/ironwood", "zones/us-central1-c/instances/ironwood",
                       "global/instanceTemplates/ironwood-it", "regions/us-central1/resourcePolicies/ironwood-wp"]
    assert not rig.compute.instances and not rig.tpus.groups and not rig.tpus.templates and not rig.tpus.policies
    assert rig.api.get_tpu_vm(ZONE, "ironwood") is None
    rig.api.delete_tpu_vm(ZONE, "ironwood")


def test_the_fake_refuses_to_delete_a_template_a_group_uses(rig: Rig) -> None:
    """What makes the order matter: the template and policy of a living group cannot go first."""
    from google.api_core import exceptions as gexc

    rig.api.create_tpu_vm(request_for("tpu7x-16"))
    with pytest.raises(gexc.BadRequest, match="already being used"):
        rig.api.c.templates.delete_unary(project=PROJECT, instance_template="ironwood-it")


def test_preempted_spot_host_makes_the_slice_preempted(rig: Rig) -> None:
    made = rig.api.create_tpu_vm(request_for("tpu7x-32", provisioning="spot"))
    rig.tpus.preempt(ZONE, made.hosts[2].instance)
    seen = rig.api.get_tpu_vm(ZONE, "ironwood")
    assert seen is not None and seen.state == "PREEMPTED" and made.hosts[2].instance in seen.detail
    assert [h.preempted for h in seen.hosts] == [False, False, True, False]
    assert seen.hosts[2].status == "TERMINATED" and seen.provisioning == "spot"


def test_broken_slice_and_lost_host(rig: Rig) -> None:
    made = rig.api.create_tpu_vm(request_for("tpu7x-32"))
    rig.tpus.break_slice(ZONE, "ironwood")
    seen = rig.api.get_tpu_vm(ZONE, "ironwood")
    assert seen is not None and (seen.state, seen.topology_state) == ("BROKEN", "FAILED")
    rig.tpus.groups[(ZONE, "ironwood")].topology_state = "ACTIVE"
    rig.tpus.lose_host(ZONE, made.hosts[1].instance)
    seen = rig.api.get_tpu_vm(ZONE, "ironwood")
    assert seen is not None and seen.state == "BROKEN" and seen.detail == "3 of 4 hosts"


def test_machine_type_not_allowed_is_one_line_and_leaves_nothing(rig: Rig) -> None:
    rig.tpus.allowed_machine_types = set()
    with pytest.raises(PermissionDenied, match="may not use this TPU machine type.*tpu7x-standard-4t") as caught:
        rig.api.create_tpu_vm(request_for("tpu7x-32"))
    assert "\n" not in str(caught.value) and "allowlisted" in (caught.value.hint or "")
    assert not rig.tpus.policies and not rig.tpus.templates and not rig.tpus.groups  # the policy went again


def test_quota_refusal_of_a_slice_says_quota_and_cleans_up(rig: Rig) -> None:
    rig.tpus.quota_chips["us-central1"] = 8
    with pytest.raises(QuotaError, match="quota exceeded.*TPU_V7X_CHIPS.*Limit: 8") as caught:
        rig.api.create_tpu_vm(request_for("tpu7x-32"))
    assert "\n" not in str(caught.value)
    assert not rig.compute.instances and not rig.tpus.groups and not rig.tpus.templates and not rig.tpus.policies


def test_quota_refusal_of_one_instance(rig: Rig) -> None:
    rig.tpus.quota_chips["us-central1"] = 0
    with pytest.raises(QuotaError, match="Quota 'TPU_V6E_CHIPS' exceeded"):
        rig.api.create_tpu_vm(request_for("v6e-1"))
    assert not rig.compute.instances


def test_no_capacity_for_a_slice_is_a_capacity_error(rig: Rig) -> None:
    rig.compute.capacity_failures[ZONE] = 1
    with pytest.raises(CapacityError, match="no capacity.*ZONE_RESOURCE_POOL_EXHAUSTED"):
        rig.api.create_tpu_vm(request_for("tpu7x-16"))
    assert not rig.tpus.groups and not rig.tpus.templates and not rig.tpus.policies
    assert rig.api.create_tpu_vm(request_for("tpu7x-16")).state == "READY"  # the next attempt gets it


def test_flex_start_and_reservation_bound_scheduling(rig: Rig) -> None:
    rig.api.create_tpu_vm(request_for("tpu7x-8", name="flex", provisioning="flex-start", max_run_seconds=7200))
    rig.api.create_tpu_vm(request_for("tpu7x-8", name="booked", provisioning="reservation-bound",
                                      reservation="my-block"))
    flex, booked = (call.body for call in rig.fake.server.calls("POST", r"/zones/us-central1-c/instances$"))
    assert flex["scheduling"] == {"onHostMaintenance": "TERMINATE", "provisioningModel": "FLEX_START",
                                  "instanceTerminationAction": "DELETE", "maxRunDuration": {"seconds": "7200"}}
    assert booked["scheduling"]["provisioningModel"] == "RESERVATION_BOUND"
    assert booked["reservationAffinity"] == {"consumeReservationType": "SPECIFIC_RESERVATION",
                                             "key": "compute.googleapis.com/reservation-name", "values": ["my-block"]}


def test_a_spec_becomes_a_request_and_the_slice_a_tpu_node(rig: Rig, tmp_path) -> None:  # noqa: ANN001
    """The path `up` will take once the kinds are wired: spec -> request -> slice -> the TpuNode workflows read."""
    from tests.helpers import write_spec
    from tpuops.cloud.base import DEAD_TPU_STATES
    from tpuops.cloud.kinds.compute_tpu import as_tpu_node, compute_request
    from tpuops.ops.specs import load_checked

    spec = load_checked(write_spec(tmp_path, """
        name: ironwood
        zone: us-central1-c
        labels: {team: lm}
        tpu: {type: tpu7x-32, flex_start: 2d, service_account: trainer@p.iam.gserviceaccount.com}
    """))
    request = compute_request(spec, ZONE, ssh_keys="me:ssh-ed25519 AAAA me")
    assert (request.machine_type, request.hosts, request.topology) == ("tpu7x-standard-4t", 4, "2x2x4")
    assert (request.provisioning, request.max_run_seconds) == ("flex-start", 2 * 86400)
    assert request.labels == {"team": "lm", "tpuops-cluster": "ironwood"}
    node = as_tpu_node(rig.api.create_tpu_vm(request), spec.tpu.type)
    assert (node.state, node.accelerator_type, [w.index for w in node.workers]) == ("READY", "tpu7x-32", [0, 1, 2, 3])
    template = rig.fake.server.calls("POST", r"/instanceTemplates$")[0].body["properties"]
    assert template["serviceAccounts"][0]["email"] == "trainer@p.iam.gserviceaccount.com"
    rig.tpus.break_slice(ZONE, "ironwood")
    broken = rig.api.get_tpu_vm(ZONE, "ironwood")
    assert broken is not None and as_tpu_node(broken, spec.tpu.type).state in DEAD_TPU_STATES


def test_resize_through_the_real_client(rig: Rig) -> None:
    """The fake's resize: a group shrunk to 0 keeps itself and loses its VMs (what a slice must never do alone)."""
    rig.api.create_tpu_vm(request_for("tpu7x-16"))
    operation = rig.api.c.groups.resize_unary(project=PROJECT, zone=ZONE, instance_group_manager="ironwood", size=0)
    assert operation.status.name == "RUNNING"  # as Compute answers at first: the wait says when it is done
    for _ in range(3):
        operation = rig.api.c.zone_operations.wait(project=PROJECT, zone=ZONE, operation=operation.name)
        if operation.status.name == "DONE":
            break
    assert operation.status.name == "DONE"
    group = rig.api.c.groups.get(project=PROJECT, zone=ZONE, instance_group_manager="ironwood")
    assert group.target_size == 0 and not rig.compute.instances


def test_every_operation_is_waited_on_until_done(rig: Rig) -> None:
    """Compute answers RUNNING at first: each insert and delete (zone, region and global operations) is waited on
    until DONE before the next step. Only a read finishes an operation here, so a step that went on without its wait
    would fail: the template is in use until the group's deletion is DONE."""
    rig.compute.operations.linger = 600.0
    rig.api.create_tpu_vm(request_for("tpu7x-16"))
    rig.api.create_tpu_vm(request_for("v6e-8", name="trillium"))
    rig.api.delete_tpu_vm(ZONE, "ironwood")
    rig.api.delete_tpu_vm(ZONE, "trillium")
    operations = rig.compute.operations.all()
    scopes = sorted(next(scope for scope in ("/global/", "/regions/", "/zones/") if scope in op.name)
                    for op in operations)
    assert scopes == ["/global/"] * 2 + ["/regions/"] * 2 + ["/zones/"] * 4  # policy, template, group, instance
    assert [(op.target, op.reads) for op in operations if not op.done or op.error or op.reads < 2] == []
    assert not rig.tpus.groups and not rig.tpus.templates and not rig.tpus.policies and not rig.compute.instances


def plain_vms(rig: Rig) -> ComputeApi:
    """The adapter of client and guard VMs (compute.py) on the rig's fake."""
    from google.auth.credentials import AnonymousCredentials

    endpoints = Endpoints.from_env({COMPUTE_ENDPOINT: rig.fake.server.url + "/compute/v1/"})
    return ComputeApi(lambda: compute_clients(endpoints, AnonymousCredentials()), PROJECT,
                      Timing(poll_interval=0.01, operation_timeout=20, retry_initial=0.01))


CLIENT = VmRequest(name="client", zone=ZONE, machine_type="e2-small", disk_gb=10, image_project="debian-cloud",
                   image_family="debian-12")


def test_a_plain_vms_operations_are_waited_on_until_done(rig: Rig) -> None:
    """The same for a client or guard VM (compute.py): created, stopped by Google, started, deleted."""
    rig.compute.operations.linger = 600.0
    vms = plain_vms(rig)
    made = vms.create_vm(CLIENT)
    assert made.state == "RUNNING"
    rig.compute.instances[(ZONE, "client")].status = "TERMINATED"
    assert vms.start_vm(ZONE, "client").state == "RUNNING"
    vms.delete_vm(ZONE, "client")
    assert vms.get_vm(ZONE, "client") is None
    operations = rig.compute.operations.all()
    assert len(operations) == 3 and all(op.done and op.error is None and op.reads >= 2 for op in operations)


def test_a_vm_whose_first_insert_got_through_is_returned_once_booted(rig: Rig) -> None:
    """A retried insert meets 409 while the first attempt's operation still runs (its answer was lost, e.g. to a
    timeout): create_vm waits until the VM has booted, as after its own operation, instead of returning it
    PROVISIONING without an address."""
    rig.compute.operations.linger = 1.0  # nobody knows the first attempt's operation: it finishes unobserved
    rig.compute.insert(FakeInstance(CLIENT.name, ZONE, f"zones/{ZONE}/machineTypes/e2-small", wants_external_ip=True))
    made = plain_vms(rig).create_vm(CLIENT)
    assert (made.state, made.internal_ip) == ("RUNNING", "10.140.0.2") and made.external_ip
    assert len(rig.fake.server.calls("POST", r"/instances$")) == 1  # the 409: one insert through the API


def reads(rig: Rig) -> list[str]:
    """The requests since the last clear, each as METHOD and what it asked for (a VM's name as VM)."""
    said = []
    for request in rig.fake.server.requests:
        path = request.path.split(f"/projects/{PROJECT}/", 1)[1]
        path = path.replace(f"zones/{ZONE}/", "").replace("instanceGroupManagers", "group")
        parts = path.split("/")
        if parts[0] == "instances" and len(parts) > 1:
            parts[1] = "VM"
        said.append(f"{request.method} {'/'.join(parts)}")
    rig.fake.server.requests.clear()
    return sorted(said)


def test_a_slice_is_read_with_one_request_per_thing_not_per_host(rig: Rig) -> None:
    """A 4-host slice: get_tpu_vm is its group, the group's VMs listed, and those VMs in one listing (their
    template's facts are theirs); host_keys adds one guest-attribute read per host. A create's poll lists the
    group's VMs once, for both its failed-attempt check and the slice. Before: 7 requests per get_tpu_vm
    (a get per host, the template each time), 11 per host_keys, two listings of the VMs per create poll."""
    made = rig.api.create_tpu_vm(request_for("tpu7x-32", provisioning="spot"))
    created = reads(rig)
    polls = created.count("GET group/ironwood")
    assert polls >= 1 and created.count("POST group/ironwood/listManagedInstances") == polls
    seen = rig.api.get_tpu_vm(ZONE, "ironwood")
    assert reads(rig) == ["GET group/ironwood", "GET instances", "POST group/ironwood/listManagedInstances"]
    assert seen == made and (seen.provisioning, seen.machine_type) == ("spot", "tpu7x-standard-4t")
    assert seen.labels == {**LABELS, "tpuops-accelerator": "tpu7x-32"}
    keys = rig.api.host_keys(ZONE, "ironwood")
    assert sorted(k.worker for k in keys) == [0, 1, 2, 3]
    assert reads(rig) == ["GET group/ironwood", "GET instances", *["GET instances/VM/getGuestAttributes"] * 4,
                          "POST group/ironwood/listManagedInstances"]
    assert [s.name for s in rig.api.find_tpu_vms(LABELS, [ZONE])] == ["ironwood"]
    assert reads(rig) == ["GET group", "GET instances", "GET instances",  # by label, then the group's by name
                          "POST group/ironwood/listManagedInstances"]


def test_a_slice_without_its_vms_yet_takes_its_facts_from_its_template(rig: Rig) -> None:
    """The group is made, its VMs are not (no capacity yet): what the slice is comes from its template."""
    rig.compute.capacity_failures[ZONE] = -1
    rig.api._create_slice(request_for("tpu7x-16", provisioning="spot"), "create")
    reads(rig)
    seen = rig.api.get_tpu_vm(ZONE, "ironwood")
    assert seen is not None and (seen.state, seen.hosts, seen.expected_hosts) == ("CREATING", (), 2)
    assert (seen.provisioning, seen.machine_type) == ("spot", "tpu7x-standard-4t") and seen.labels["tpuops-cluster"]
    assert reads(rig) == ["GET global/instanceTemplates/ironwood-it", "GET group/ironwood",
                          "POST group/ironwood/listManagedInstances"]
    assert [s.name for s in rig.api.find_tpu_vms(LABELS, [ZONE])] == ["ironwood"]  # found by its group alone
    rig.api.delete_tpu_vm(ZONE, "ironwood")


def test_a_vm_of_the_group_named_otherwise_is_still_one_of_its_hosts(rig: Rig) -> None:
    """The listing asks for the VMs named after the group; one it does not return is asked for by name."""
    made = rig.api.create_tpu_vm(request_for("tpu7x-32"))
    old = made.hosts[1].instance
    with rig.compute.lock:
        vm = rig.compute.instances.pop((ZONE, old))
        vm.name = "renamed-by-hand"
        rig.compute.instances[(ZONE, vm.name)] = vm
        group = rig.tpus.groups[(ZONE, "ironwood")]
        group.instances[group.instances.index(old)] = vm.name
    reads(rig)
    seen = rig.api.get_tpu_vm(ZONE, "ironwood")
    assert seen is not None and seen.state == "READY" and seen.hosts[1].instance == "renamed-by-hand"
    assert reads(rig) == ["GET group/ironwood", "GET instances", "GET instances/VM",
                          "POST group/ironwood/listManagedInstances"]
