"""The environment of a run's trainer on every worker: tpuops's own TPUOPS_* variables, what each framework
needs to find the TPU, trainer.env, JAX's compilation cache, and with Multislice the MEGASCALE_* defaults
(which only fill what the host itself lacks: see shipped/start.sh)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tpuops.access.cluster import ClusterAccess
from tpuops.context import Context
from tpuops.ops import autostop as cost_guard
from tpuops.providers.base import TrainerSite
from tpuops.spec import Spec, region_of
from tpuops.state import WorkerRecord, bucket_of, record_prefix
from tpuops.watchdog.launch_hooks import with_hang_abort

JAX_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"
# Multislice: the port the slices' runtimes meet on when neither the host's environment nor its tpu-env metadata
# gives one, nor a coordinator address with its port (8081, as Ray's get_tpu_coordinator_env_vars and levanter
# use), and the variable start.sh reads settings from that only fill gaps in what the host already has.
MEGASCALE_PORT = 8081
HOST_DEFAULTS_ENV = "TPUOPS_HOST_DEFAULTS"


def trainer_envs(ctx: Context, access: ClusterAccess, spec: Spec, run_id: str,
                 restart: int = 0) -> dict[str, dict[str, str]]:
    """The environment of every worker's trainer, by worker name."""
    workers = access.workers
    coordinator = access.provider.coordinator(workers[0].internal_ip)
    logdir = localize(access, spec.logs.tensorboard or "")
    common = {
        "TPUOPS_CLUSTER": access.state.name,
        "TPUOPS_RUN_ID": run_id,
        "TPUOPS_NUM_WORKERS": str(len(workers)),
        "TPUOPS_COORDINATOR": coordinator,
        "TPUOPS_LOGDIR": logdir,
        **framework_env(access, spec),
    }
    checkpoints = spec.checkpoints_for(region_of(access.state.zone)) if access.state.zone else None
    if checkpoints:  # the TPU's region's bucket: a run that moved to another pool finds its copied checkpoints
        common["TPUOPS_CHECKPOINT_DIR"] = localize(access, checkpoints)
    if restart:
        common |= {"TPUOPS_RESTART": str(restart), "TPUOPS_RESUME": "1"}
    user_env = {key: localize(access, value) for key, value in (spec.trainer.env if spec.trainer else {}).items()}
    common |= compilation_cache_env(ctx, access, spec, user_env)
    envs = {w.name: {**user_env, **common, "TPUOPS_WORKER_ID": str(i), **slice_env(w, workers, user_env)}
            for i, w in enumerate(workers)}
    return with_hang_abort(envs, user_env)


def slice_env(worker: WorkerRecord, workers: Sequence[WorkerRecord], user_env: Mapping[str, str]) -> dict[str, str]:
    """Which slice a worker is in, and with Multislice the MEGASCALE_* settings the TPU runtime joins the
    slices by (coordinator on slice 0's worker 0). Those are defaults: a value the worker's own environment
    already has, its `tpu-env` metadata lists (Google's runtime's, read by start.sh) or trainer.env sets wins."""
    slices = 1 + max(w.slice for w in workers)
    mates = [w for w in workers if w.slice == worker.slice]
    env = {"TPUOPS_SLICE_ID": str(worker.slice), "TPUOPS_NUM_SLICES": str(slices),
           "TPUOPS_SLICE_WORKER_ID": str(mates.index(worker)), "TPUOPS_SLICE_NUM_WORKERS": str(len(mates))}
    if slices == 1:
        return env
    megascale = {"MEGASCALE_COORDINATOR_ADDRESS": workers[0].internal_ip, "MEGASCALE_NUM_SLICES": str(slices),
                 "MEGASCALE_SLICE_ID": str(worker.slice), "MEGASCALE_PORT": str(MEGASCALE_PORT)}
    defaults = " ".join(f"{name}={value}" for name, value in megascale.items() if name not in user_env)
    return env | {HOST_DEFAULTS_ENV: defaults}


def compilation_cache_env(ctx: Context, access: ClusterAccess, spec: Spec,
                          user_env: Mapping[str, str]) -> dict[str, str]:
    """JAX's persistent compilation cache in the run's bucket: a restart after preemption or autostop reuses
    the compiled step instead of paying for the compilation again (unless trainer.env sets it)."""
    framework = spec.trainer.framework if spec.trainer else None
    bucket = bucket_of(access.state, spec)
    if framework != "jax" or not bucket or JAX_CACHE_ENV in user_env:
        return {}
    cache = f"{record_prefix(bucket, access.state.name)}/{cost_guard.JAX_CACHE_DIR}"
    return {JAX_CACHE_ENV: localize(access, cache)}


def framework_env(access: ClusterAccess, spec: Spec) -> dict[str, str]:
    """What each framework needs to find the TPU (the provider knows: TPU_NAME and XRT for a legacy Node,
    PJRT on a TPU VM, the CPU on the local simulator)."""
    tpu = access.state.tpu_record()
    site = TrainerSite(access.state.name, spec.trainer.framework if spec.trainer else None, spec.tpu.mode,
                       tuple(tpu.node_ips) if tpu else ())
    return access.provider.framework_env(site)


def localize(access: ClusterAccess, text: str) -> str:
    """The text as the workers must see it (the local provider's gs://BUCKET is a directory)."""
    spec = access.spec
    buckets = [name for name in (spec.bucket.name, spec.home_bucket) if name] if spec and spec.bucket else []
    return access.provider.localize(text, buckets)
