"""The guard VM's startup script: Compute Engine runs it as root at every boot.

It installs python3-venv when the image lacks it, mirrors the bundle `guard up` staged in the bucket (the tpuops
wheel, state, spec, code snapshot) into the guard's home with the VM's own token, installs that wheel into a
venv (its dependencies come from PyPI: the VM needs outbound internet, through its external IP or Cloud NAT),
and runs `tpuops watch NAME --headless` as a systemd service with Restart=always, HOME and TPUOPS_HOME set to the
guard's home. The service waits for the cluster's SSH key, which `guard up` copies to the guard's disk over SSH
after boot: it never passes through the bucket, the metadata or a log.

The script is plain POSIX sh, every value single-quoted (`shlex.quote`), made of functions so that tests can
source it (TPUOPS_GUARD_FUNCTIONS_ONLY=1) and run its parts in a temporary directory.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from tpuops.shipped import program
from tpuops.spec import NAME_RE

SERVICE = "tpuops-guard"
GUARD_HOME = "/var/lib/tpuops-guard"
GUARD_USER = "tpuops-guard"
WHEELS = "wheels"  # under the bundle prefix, and under the guard's home once fetched
BUNDLE_WAIT_SECONDS = 3600  # how long a booting VM waits for `guard up` to stage the bundle
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")  # systemd's unit syntax needs no quoting for these


@dataclass(frozen=True)
class GuardBoot:
    """What the startup script needs to know."""

    cluster: str
    bucket: str
    bundle_prefix: str  # object prefix in the bucket, e.g. .tpuops/NAME/guard/bundle/
    home: str = GUARD_HOME
    user: str = GUARD_USER

    def __post_init__(self) -> None:
        # These end up in a systemd unit too, where shell quoting does not apply: only plain values pass.
        if not NAME_RE.match(self.cluster):
            raise ValueError(f"not a cluster name: {self.cluster!r}")
        if not SAFE_PATH.match(self.home) or not re.match(r"^[a-z_][a-z0-9_-]*$", self.user):
            raise ValueError(f"guard home {self.home!r} or user {self.user!r} is not a plain path and name")


def key_path(home: str, cluster: str) -> str:
    """Where the cluster's private key lives on the guard (the state directory tpuops itself uses)."""
    return f"{home}/clusters/{cluster}/id_ed25519"


def fetch_program() -> str:
    text = program("guard_fetch_bundle")  # with its part, metadata_token.py
    assert "\nFETCH_BUNDLE_PY\n" not in text
    return text


def startup_script(boot: GuardBoot) -> str:
    q = shlex.quote
    values = {
        "CLUSTER": boot.cluster, "BUCKET": boot.bucket, "BUNDLE_PREFIX": boot.bundle_prefix,
        "GUARD_HOME": boot.home, "GUARD_USER": boot.user, "SERVICE": SERVICE,
        "UNIT_DIR": "/etc/systemd/system", "BUNDLE_WAIT": str(BUNDLE_WAIT_SECONDS),
    }
    assignments = "\n".join(f"{name}={q(value)}" for name, value in values.items())
    return TEMPLATE.replace("@ASSIGNMENTS@", assignments).replace("@FETCH@", fetch_program().rstrip("\n"))


TEMPLATE = r"""#!/bin/sh
# tpuops guard: installs tpuops and runs `tpuops watch CLUSTER --headless` under systemd (written by `tpuops guard up`).
set -eu
@ASSIGNMENTS@
VENV="$GUARD_HOME/venv"

log() { echo "tpuops-guard: $*"; }

ensure_python() {
    # Debian's python3 lacks ensurepip until python3-venv is installed: venv creation would fail without it.
    if ! python3 -c 'import ensurepip' >/dev/null 2>&1; then
        log "installing python3-venv"
        apt-get update -q
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv
    fi
}

ensure_user() {
    if ! id -u "$GUARD_USER" >/dev/null 2>&1; then
        useradd --system --home-dir "$GUARD_HOME" --shell /usr/sbin/nologin "$GUARD_USER"
    fi
    mkdir -p "$GUARD_HOME/clusters/$CLUSTER"
    chmod 700 "$GUARD_HOME"
}

fetch_bundle() {
    log "fetching gs://$BUCKET/$BUNDLE_PREFIX"
    (umask 077 && python3 - "$BUCKET" "$BUNDLE_PREFIX" "$GUARD_HOME" --wait "$BUNDLE_WAIT" <<'FETCH_BUNDLE_PY'
@FETCH@
FETCH_BUNDLE_PY
    )
}

install_tpuops() {
    # wheels/CURRENT names the wheel `guard up` staged last: the script stays the same across versions.
    name="$(cat "$GUARD_HOME/wheels/CURRENT")"
    case "$name" in
        */*) log "wheels/CURRENT does not name a tpuops wheel"; return 1 ;;
        tpuops-*.whl) ;;
        *) log "wheels/CURRENT does not name a tpuops wheel"; return 1 ;;
    esac
    wheel="$GUARD_HOME/wheels/$name"
    if [ ! -x "$VENV/bin/pip" ]; then
        python3 -m venv "$VENV"
    fi
    stamp="$(sha256sum "$wheel" | cut -d ' ' -f 1)"
    if [ "$(cat "$VENV/.tpuops-wheel" 2>/dev/null || true)" != "$stamp" ]; then
        log "installing $name (its dependencies from PyPI)"
        "$VENV/bin/pip" install --quiet --disable-pip-version-check "$wheel"
        # The same version again with other code (a changed checkout): replace tpuops itself.
        "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
        echo "$stamp" > "$VENV/.tpuops-wheel"
    fi
}

write_unit() {
    key="$GUARD_HOME/clusters/$CLUSTER/id_ed25519"
    cat > "$UNIT_DIR/$SERVICE.service" <<UNIT
[Unit]
Description=tpuops guard of cluster $CLUSTER (tpuops watch --headless)
Wants=network-online.target
After=network-online.target

[Service]
User=$GUARD_USER
Environment=HOME=$GUARD_HOME
Environment=TPUOPS_HOME=$GUARD_HOME
Environment=PYTHONUNBUFFERED=1
# The cluster's key arrives over SSH after boot (tpuops guard up): wait for it rather than fail.
ExecStartPre=/bin/sh -c 'until [ -s $key ]; do sleep 5; done'
ExecStart=$VENV/bin/tpuops watch $CLUSTER --headless
Restart=always
RestartSec=10
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
UNIT
}

start_service() {
    systemctl daemon-reload
    systemctl enable "$SERVICE"
    systemctl restart "$SERVICE"
}

main() {
    ensure_python
    ensure_user
    fetch_bundle
    install_tpuops
    chown -R "$GUARD_USER:$GUARD_USER" "$GUARD_HOME"
    write_unit
    start_service
    log "running: systemctl status $SERVICE"
}

if [ "${TPUOPS_GUARD_FUNCTIONS_ONLY:-}" != 1 ]; then
    main
fi
"""
