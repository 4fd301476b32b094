"""The guard on Google Cloud: one small VM per cluster (cloud/kinds/guard_vm.py) that runs the headless watch.

`check` does every local step before anything is written: it judges that the cluster's key exists, builds the
wheel of the running tpuops (providers/guard_wheel.py: with the standard library alone, so any install can) and
checks that the network lets the guard reach the workers' SSH port. `guard up` then stages the cluster's state,
spec and code snapshot (guard/bundle.py) in the bundle (gs://BUCKET/.tpuops/NAME/guard/bundle/, mirrored into the
VM's TPUOPS_HOME), and `ensure` creates or adopts the VM with its startup script (providers/guard_startup.py),
stages the wheel in the bundle, then copies the cluster's SSH key and guard.notify's webhook to the guard's disk
over SSH (0600, owned by the guard's user; on the wire only inside SSH, on stdin: never in the bucket, the
metadata, an argument or a log). An adopted VM is asked to run its startup script again, which fetches what
changed and restarts the service.

A 403 becomes one line naming the role to grant, and a VM created by a call that then failed is deleted again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from tpuops import keys
from tpuops.cloud.base import Cloud, Vm
from tpuops.cloud.blobs import BlobStore, same_content
from tpuops.cloud.kinds.guard_vm import GuardVmSettings, ensure_guard_vm
from tpuops.errors import CloudError, PermissionDenied, RemoteError, TpuopsError, UsageError
from tpuops.plan.guard_reach import GuardSource, letting_in, missing_rule_command
from tpuops.plan.guard_vm_shape import GUARD_ROLE, GUARD_TAG, ROLE_LABEL
from tpuops.providers.guard_host import BUNDLE, NOTIFY_FILE, GuardHostInfo, GuardPlacement
from tpuops.providers.guard_startup import GUARD_HOME, GUARD_USER, GuardBoot, startup_script
from tpuops.providers.guard_wheel import running_wheel
from tpuops.spec import CLUSTER_LABEL

T = TypeVar("T")
# A VM just created answers SSH within a minute or two; its host keys reach the guest attributes about then.
SSH_WAIT_SECONDS = 300.0
HOST_KEY_WAIT_SECONDS = 90.0
# Runs the startup script again on a VM that is up (it is GCE's oneshot unit; --no-block: pip may take minutes).
REFRESH = "sudo -n systemctl --no-block restart google-startup-scripts.service"
# Simulators and tests only: where the guard lives on "the VM", as whom, and how it is refreshed.
HOME_ENV, USER_ENV, REFRESH_ENV = "TPUOPS_GUARD_VM_HOME", "TPUOPS_GUARD_VM_USER", "TPUOPS_GUARD_VM_REFRESH"

VM_STATES = {"RUNNING": "running", "PROVISIONING": "starting", "STAGING": "starting", "STOPPING": "stopping",
             "SUSPENDING": "stopping", "STOPPED": "stopped", "SUSPENDED": "stopped", "TERMINATED": "stopped"}

# Takes the file on stdin; $1 guard home, $2 cluster, $3 the guard's user (created here when the startup script
# has not yet done it, exactly as it would), $4 the file's name in the cluster's directory.
INSTALL_FILE = r"""set -eu
sudo -n sh -c '
set -eu
id -u "$3" >/dev/null 2>&1 || useradd --system --home-dir "$1" --shell /usr/sbin/nologin "$3"
umask 077
dir="$1/clusters/$2"
mkdir -p "$dir"
cat > "$dir/$4.partial"
chown "$3:" "$1" "$1/clusters" "$dir" "$dir/$4.partial"
chmod 600 "$dir/$4.partial"
mv -f "$dir/$4.partial" "$dir/$4"
' sh "$1" "$2" "$3" "$4"
"""


@dataclass(frozen=True)
class GuardVmLayout:
    home: str = GUARD_HOME
    user: str = GUARD_USER
    refresh: str = REFRESH

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> GuardVmLayout:
        return cls(env.get(HOME_ENV) or cls.home, env.get(USER_ENV) or cls.user, env.get(REFRESH_ENV) or cls.refresh)


class GcpGuardHost:
    """GuardHost over the Compute API, the run's bucket and SSH."""

    def __init__(self, cloud: Callable[[], Cloud], blob_store: Callable[[str], BlobStore], wheel_cache: Path,
                 layout: GuardVmLayout = GuardVmLayout(), ssh_wait: float = SSH_WAIT_SECONDS,
                 host_key_wait: float = HOST_KEY_WAIT_SECONDS) -> None:
        self._cloud = cloud
        self._blob_store = blob_store
        self.wheel_cache = wheel_cache
        self.layout = layout
        self.ssh_wait = ssh_wait
        self.host_key_wait = host_key_wait

    # ---------------------------------------------------------------------------------------------- GuardHost
    def bundle_home(self) -> str:
        return self.layout.home

    def check(self, placement: GuardPlacement) -> None:
        if not placement.zone:
            raise UsageError(f"no zone for the guard of {placement.cluster}", "set guard.zone or zone in the spec")
        if placement.login is None or not placement.login.key_path.is_file():  # a new key would be one no worker knows
            raise UsageError(f"no SSH key for cluster {placement.cluster}",
                             f"run `tpuops up` for {placement.cluster} first")
        # Every local step before the first call that creates something: the public key the VM's metadata
        # carries, and the wheel (built, or found in the cache, where stage_wheel finds it again).
        keys.ensure_key_pair(placement.login.key_path.parent, placement.cluster)
        running_wheel(self.wheel_cache)
        check_reach(self._cloud(), placement)

    def ensure(self, placement: GuardPlacement, bundle_prefix: str) -> GuardHostInfo:
        cloud = self._cloud()
        bundle = bundle_objects(placement.bucket, bundle_prefix)
        settings = self.settings(placement, bundle)
        vm, created = with_role(lambda: ensure_guard_vm(cloud, settings), vm_role(placement))
        try:
            self.stage_wheel(placement.bucket, bundle)
            trouble = self.hand_over_key(cloud, vm, placement, refresh=not created)
        except BaseException:
            if created:  # nothing half-done: the next `guard up` starts clean
                with contextlib.suppress(TpuopsError):
                    cloud.vms.delete_vm(vm.zone, vm.name)
            raise
        info = host_info(vm)
        return replace(info, detail=f"{info.detail}; {trouble}") if trouble else info

    def describe(self, cluster: str) -> GuardHostInfo | None:
        found = self._find(cluster)
        return host_info(found[0]) if found else None

    def delete(self, cluster: str) -> bool:
        found = self._find(cluster)
        cloud = self._cloud()
        for vm in found:
            with_role(lambda vm=vm: cloud.vms.delete_vm(vm.zone, vm.name), "roles/compute.instanceAdmin.v1")
        return bool(found)

    # ------------------------------------------------------------------------------------------------ steps
    def settings(self, placement: GuardPlacement, bundle_prefix: str) -> GuardVmSettings:
        login = placement.login
        assert login is not None and placement.zone is not None, "GcpGuardHost.check comes first"
        public = keys.ensure_key_pair(login.key_path.parent, placement.cluster)
        boot = GuardBoot(placement.cluster, placement.bucket, bundle_prefix, self.layout.home, self.layout.user)
        return GuardVmSettings(
            cluster=placement.cluster, zone=placement.zone, machine_type=placement.machine_type,
            service_account=placement.service_account, labels=placement.labels,
            startup_script=startup_script(boot), ssh_keys=keys.ssh_keys_metadata(login.user, public),
            network=placement.network, subnetwork=placement.subnetwork,
        )

    def stage_wheel(self, bucket: str, bundle_prefix: str) -> str:
        """The running tpuops' wheel under BUNDLE/wheels/, then CURRENT naming it (the VM installs what CURRENT
        names, so it never sees a name without its wheel); older wheels are removed."""
        wheel = running_wheel(self.wheel_cache)
        store = self._blob_store(f"gs://{bucket}/{bundle_prefix.strip('/')}")
        role = "roles/storage.objectAdmin on the bucket"
        existing = with_role(lambda: store.list("wheels/"), role)
        name = f"wheels/{wheel.name}"
        if not same_content(wheel, next((b for b in existing if b.name == name), None)):
            with_role(lambda: store.upload_file(wheel, name), role)
        pointer = self.wheel_cache / f"CURRENT-{wheel.name}"
        pointer.write_text(wheel.name)
        with_role(lambda: store.upload_file(pointer, "wheels/CURRENT"), role)
        for old in existing:
            if old.name.endswith(".whl") and old.name != name:
                store.delete(old.name)
        return wheel.name

    def hand_over_key(self, cloud: Cloud, vm: Vm, placement: GuardPlacement, refresh: bool) -> str | None:
        """Copy the key; on an adopted VM, run its startup script again. What went wrong with that, if anything
        (the guard keeps running what it has)."""
        from tpuops.remote.ssh import KnownHosts, SshRunner, SshSettings, SshTarget, load_private_key

        login = placement.login
        assert login is not None
        host = vm.external_ip or vm.internal_ip
        if not host:
            raise CloudError(f"guard VM {vm.name} has no address", "check it in the console, or `tpuops guard down`")
        self.pin_host_key(cloud, vm, host, placement.ssh_port, login.known_hosts_path.parent)
        settings = SshSettings(login.key_path, login.known_hosts_path, connect_timeout=self.ssh_wait)
        known = KnownHosts(login.known_hosts_path, trust_on_first_use=True)
        target = SshTarget("guard", host, placement.ssh_port, login.user)
        runner = SshRunner(target, settings, known, load_private_key(login.key_path))
        failed = f"could not copy the cluster's key to guard VM {vm.name}"
        unreachable = (f"this machine must reach the VM at {host} on tcp:{placement.ssh_port} (the default network's "
                       "default-allow-ssh lets it), then `tpuops guard up` again")
        # The webhook first (empty: none), so the service the key lets start already has it.
        notify = placement.notify.get_secret_value().encode() if placement.notify is not None else b""
        try:
            for name, content in ((NOTIFY_FILE, notify), (keys.PRIVATE_KEY, login.key_path.read_bytes())):
                argv = ["sh", "-c", INSTALL_FILE, "sh", self.layout.home, placement.cluster, self.layout.user, name]
                try:
                    done = runner.run(argv, stdin=content, capture=True, timeout=120)
                except RemoteError as err:  # could not connect: said for a worker, said again for the guard
                    raise RemoteError(f"{failed}: {err.message}", unreachable) from err
                if not done.ok:
                    why = done.error or (done.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
                    hint = unreachable if done.exit_code is None else \
                        "the login user needs passwordless sudo (Compute Engine gives it to ssh-keys users)"
                    raise RemoteError(f"{failed}: {why}", hint)
            if refresh:
                again = runner.run(self.layout.refresh, capture=True, timeout=60)
                if not again.ok:
                    why = again.error or (again.stderr.decode(errors="replace").strip().splitlines() or ["?"])[-1]
                    return f"not refreshed ({why}): it runs the code and spec it had"
            return None
        finally:
            runner.close()

    def pin_host_key(self, cloud: Cloud, vm: Vm, host: str, port: int, cluster_dir: Path) -> None:
        """The host key the VM published (guest attributes), so the first connection is not trust-on-first-use;
        a VM that has not published it in time is trusted on first use, as `up` does with workers."""
        deadline = time.monotonic() + self.host_key_wait
        while True:
            found = cloud.vms.host_keys(vm.zone, vm.name)
            if found or time.monotonic() >= deadline:
                break
            time.sleep(2.0)
        if found:
            keys.pin_host_keys(cluster_dir, [keys.PinnedKey(host, port, k.key_type, k.key) for k in found])

    def _find(self, cluster: str) -> list[Vm]:
        labels = {CLUSTER_LABEL: cluster, ROLE_LABEL: GUARD_ROLE}
        return with_role(lambda: self._cloud().vms.find_vms(labels), "roles/compute.viewer")


def bundle_objects(bucket: str, guard_prefix: str) -> str:
    """The object prefix the VM mirrors into its TPUOPS_HOME: `bundle/` under the guard's prefix (given as
    gs://BUCKET/.tpuops/NAME/guard or as the object prefix), apart from the lease and the ledger beside it."""
    prefix = guard_prefix.removeprefix(f"gs://{bucket}").strip("/")
    return f"{prefix}/{BUNDLE}/" if prefix else f"{BUNDLE}/"


def check_reach(cloud: Cloud, placement: GuardPlacement) -> None:
    """Refuse, before anything is created, a guard whose network has no rule letting it reach the workers' SSH
    port, naming the rule to add."""
    if cloud.firewalls is None:
        return
    firewalls = cloud.firewalls
    rules = with_role(lambda: firewalls.ingress_rules(placement.network),
                      "roles/compute.networkViewer (or roles/compute.instanceAdmin.v1)")
    source = GuardSource(GUARD_TAG, placement.service_account, custom_subnetwork=placement.subnetwork is not None)
    if letting_in(rules, source, placement.ssh_port) is None:
        raise CloudError(
            f"the guard could not reach the workers: no firewall rule of network {placement.network} lets it in on "
            f"tcp:{placement.ssh_port}; nothing was created",
            f"add one: `{missing_rule_command(placement.network, placement.cluster, GUARD_TAG, placement.ssh_port)}`",
        )


def vm_role(placement: GuardPlacement) -> Callable[[PermissionDenied], str]:
    def role(err: PermissionDenied) -> str:
        if "actas" in err.message.lower() or "serviceaccountuser" in err.message.lower():
            account = placement.service_account or "the Compute default service account"
            return f"roles/iam.serviceAccountUser on {account}"
        return "roles/compute.instanceAdmin.v1"

    return role


def with_role(call: Callable[[], T], role: str | Callable[[PermissionDenied], str]) -> T:
    """`call`, with a 403 turned into one line that names the role to grant."""
    try:
        return call()
    except PermissionDenied as err:
        missing = role(err) if callable(role) else role
        raise PermissionDenied(f"{err.message} (missing role: {missing})",
                               f"grant {missing} to the account running tpuops") from err


def host_info(vm: Vm) -> GuardHostInfo:
    detail = f"{vm.machine_type or '-'}, external {vm.external_ip or '-'}, internal {vm.internal_ip or '-'}"
    return GuardHostInfo("vm", vm.name, vm.zone, VM_STATES.get(vm.state, vm.state.lower()), detail)
