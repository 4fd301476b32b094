"""`tpuops init --from-quota`: a spec whose pools are where the project's quota is granted."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from tpuops import catalog
from tpuops.cloud.quotas import QuotaLimit, provisioning_for
from tpuops.context import Context
from tpuops.errors import UsageError
from tpuops.ops.quota import QuotaReport, granted_limits, project_quota
from tpuops.ops.specs import SCHEMA_FILE, SCHEMA_MODELINE, spec_destination, spec_schema
from tpuops.spec import parse_spec

SPEC_HEAD = """# tpuops spec written by `tpuops init --from-quota` from the TPU quota of {source} on {today}.
# The pools are the zones where that quota is above Google's default (a TRC grant looks like this), most first;
# each type is the largest the limit holds. Reorder them, pick smaller types, and set the trainer.
"""


def init_from_quota(ctx: Context, destination: Path, project: str | None = None, local: bool = False,
                    force: bool = False) -> tuple[Path, QuotaReport]:
    destination = spec_destination(destination, force)
    report = project_quota(ctx, project, local=local)
    text = spec_text(report, local)
    parse_spec(text, str(destination))  # what is written must be a spec `plan` accepts
    destination.write_text(SCHEMA_MODELINE + text)
    (destination.parent / SCHEMA_FILE).write_text(__import__("json").dumps(spec_schema(), indent=2) + "\n")
    return destination, report


def spec_text(report: QuotaReport, local: bool) -> str:
    pools = [line for limit in granted_limits(report) if (line := pool_line(limit))]
    if not pools:
        raise UsageError(f"the granted quota of {report.project} names no TPU generation the catalog knows",
                         "see `tpuops quota`, and write tpu.pools by hand")
    source = "the local simulator" if local else f"project {report.project}"
    head = SPEC_HEAD.format(source=source, today=date.today().isoformat())
    where = "provider: local\n" if local else f"project: {report.project}\n"
    bucket = "my-run-{region}" if local else f"{report.project}-tpuops-{{region}}"
    return (f"{head}name: my-run\n{where}tpu:\n  pools:\n" + "".join(pools)
            + f"bucket:\n  name: {bucket}            # one bucket per pool's region\n"
            + "code: {path: .}\ntrainer:\n  framework: jax\n  command: python3 train.py --logdir $TPUOPS_LOGDIR\n")


def pool_line(limit: QuotaLimit) -> str | None:
    generation = catalog.load().generations.get(limit.generation)
    if generation is None:
        return None
    sizes = [size for size in generation.sizes if limit.limit < 0 or size <= limit.limit]
    if limit.slices == "device":
        sizes = [size for size in sizes if size <= 8]
    elif limit.slices == "pod":
        sizes = [size for size in sizes if size > 8]
    if not sizes:
        return None
    provisioning = provisioning_for(limit.kind)
    held = "unlimited" if limit.limit < 0 else f"{limit.limit} {limit.unit}"
    return (f"    - {{type: {generation.name}-{max(sizes)}, zone: {limit.location}, provisioning: {provisioning}}}"
            f"   # {held} granted\n")
