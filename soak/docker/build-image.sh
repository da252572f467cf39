#!/usr/bin/env bash
# Builds the soak's PostgreSQL 15 image without any container registry, for the Docker provider
# (soak/src/provider/docker.rs) on a machine whose only outside reach is the Debian mirror.
#
#   soak/docker/build-image.sh [IMAGE:TAG]        (default queen-soak-postgres:15)
#
# Recipe: debootstrap a minimal Debian with postgresql-15 from the suite and mirror apt already
# uses here, run initdb at build time (so a container is ready in about 0.3 s instead of the
# seconds initdb takes), add an entrypoint that runs postgres in the foreground, `docker import`.
# The image carries a hash of this script as a label: an image built by this same recipe is
# reused as it is (the debootstrap alone takes about 50 s); a changed recipe rebuilds it.
#
# Runs as root (debootstrap and chroot), with a Docker engine answering. Overrides, for a machine
# whose apt sources say something else: QUEEN_SOAK_DEBIAN_SUITE, QUEEN_SOAK_DEBIAN_MIRROR.
set -euo pipefail

readonly IMAGE="${1:-queen-soak-postgres:15}"
readonly PG_MAJOR=15
readonly RECIPE_LABEL=org.queen-soak.recipe
readonly ENTRYPOINT=/usr/local/bin/queen-soak-postgres
readonly DATA_DIR=/var/lib/postgresql/data
# Bounds: a `docker` call that does not answer, and another build of the same image holding the lock.
readonly DOCKER_ANSWER_SECONDS=20
readonly LOCK_WAIT_SECONDS=900

say() { echo "build-image: $*"; }
fail() { echo "build-image: $*" >&2; exit 1; }

[[ "$(id -u)" == 0 ]] || fail "must run as root (debootstrap and chroot need it)"
command -v docker >/dev/null || fail "no docker CLI on PATH (apt-get install -y docker.io)"
timeout "$DOCKER_ANSWER_SECONDS" docker info >/dev/null 2>&1 \
    || fail "no Docker engine answers (\`docker info\` failed); start dockerd first, e.g. soak/docker/ci-docker.sh does"

recipe_hash="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)"
readonly recipe_hash

# Two builds of the same image at once would both debootstrap; the second waits and then reuses.
exec 9>"/tmp/queen-soak-build-image.lock"
flock -w "$LOCK_WAIT_SECONDS" 9 || fail "another build held the lock for ${LOCK_WAIT_SECONDS} s"

existing_hash="$(timeout "$DOCKER_ANSWER_SECONDS" docker image inspect "$IMAGE" \
    --format "{{ index .Config.Labels \"$RECIPE_LABEL\" }}" 2>/dev/null || true)"
if [[ "$existing_hash" == "$recipe_hash" ]]; then
    say "reusing $IMAGE (already built by this recipe, $RECIPE_LABEL=$recipe_hash); nothing to do"
    exit 0
elif [[ -n "$existing_hash" ]]; then
    say "$IMAGE exists but was built by another recipe ($existing_hash); rebuilding"
fi

if ! command -v debootstrap >/dev/null; then
    say "debootstrap missing; installing it"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q debootstrap
fi

# Prints "URI SUITE FILE" for every enabled `deb` entry of apt's sources, one-line and deb822.
apt_sources() {
    local file
    shopt -s nullglob
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f "$file" ]] || continue
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$file" \
            | awk -v file="$file" '$1 == "deb" && NF >= 3 { print $2, $3, file }'
    done
    for file in /etc/apt/sources.list.d/*.sources; do
        awk -v file="$file" '
            function flush(  n, m, i, j, u, s) {
                if (types ~ /(^| )deb( |$)/ && enabled != "no") {
                    n = split(uris, u, " "); m = split(suites, s, " ")
                    for (i = 1; i <= n; i++) for (j = 1; j <= m; j++) print u[i], s[j], file
                }
                types = ""; uris = ""; suites = ""; enabled = "yes"
            }
            BEGIN { enabled = "yes" }
            /^[[:space:]]*#/ { next }
            /^[[:space:]]*$/ { flush(); next }
            {
                key = tolower($1); value = $0; sub(/^[^:]*:[[:space:]]*/, "", value)
                if (key == "types:") types = value
                else if (key == "uris:") uris = value
                else if (key == "suites:") suites = value
                else if (key == "enabled:") enabled = tolower(value)
            }
            END { flush() }' "$file"
    done
    shopt -u nullglob
}

# The release itself (not -updates or -security) of a suite debootstrap knows, over http(s).
suite="${QUEEN_SOAK_DEBIAN_SUITE:-}"
mirror="${QUEEN_SOAK_DEBIAN_MIRROR:-}"
source_file="the environment"
if [[ -z "$suite" || -z "$mirror" ]]; then
    while read -r uri candidate file; do
        [[ "$uri" =~ ^https?:// && "$candidate" != *-* && "$candidate" != */* ]] || continue
        [[ -e "/usr/share/debootstrap/scripts/$candidate" ]] || continue
        suite="${suite:-$candidate}"
        mirror="${mirror:-$uri}"
        source_file="$file"
        break
    done < <(apt_sources)
fi
[[ -n "$suite" && -n "$mirror" ]] \
    || fail "no Debian suite and mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/*.{list,sources}; set QUEEN_SOAK_DEBIAN_SUITE and QUEEN_SOAK_DEBIAN_MIRROR"
say "building $IMAGE: debootstrap suite $suite from $mirror (read from $source_file), postgresql-$PG_MAJOR"

work_dir="$(mktemp -d "${TMPDIR:-/var/tmp}/queen-soak-image.XXXXXX")"
readonly work_dir
rootfs="$work_dir/rootfs"
# A failed debootstrap can leave /proc or /sys mounted inside the rootfs: unmount them first, and
# never let rm cross into another filesystem.
cleanup() {
    local mount_point
    while read -r mount_point; do
        umount -l "$mount_point" 2>/dev/null || true
    done < <(awk -v dir="$work_dir/" 'index($2, dir) == 1 { print $2 }' /proc/mounts | sort -r)
    rm -rf --one-file-system "$work_dir"
}
trap cleanup EXIT

debootstrap --variant=minbase --include="postgresql-$PG_MAJOR" "$suite" "$rootfs" "$mirror" \
    >"$work_dir/debootstrap.log" 2>&1 \
    || { tail -n 30 "$work_dir/debootstrap.log" >&2; fail "debootstrap failed (log above)"; }
say "debootstrap done in ${SECONDS} s"

in_rootfs() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C "$@"; }

# The package's default cluster (15/main) is not the one the image runs: drop it.
if [[ -d "$rootfs/etc/postgresql/$PG_MAJOR/main" ]]; then
    in_rootfs pg_dropcluster --stop "$PG_MAJOR" main
fi

postgres_uid="$(awk -F: '$1 == "postgres" { print $3 }' "$rootfs/etc/passwd")"
postgres_gid="$(awk -F: '$1 == "postgres" { print $4 }' "$rootfs/etc/passwd")"
[[ -n "$postgres_uid" && -n "$postgres_gid" ]] || fail "no postgres user in the rootfs"
mkdir -p "$rootfs/run/postgresql"
chown "$postgres_uid:$postgres_gid" "$rootfs/run/postgresql"

chroot --userspec="$postgres_uid:$postgres_gid" "$rootfs" \
    /usr/bin/env -i PATH=/usr/bin:/bin LANG=C HOME=/var/lib/postgresql \
    "/usr/lib/postgresql/$PG_MAJOR/bin/initdb" --pgdata="$DATA_DIR" --username=postgres \
    --auth=trust --encoding=UTF8 --locale=C --no-instructions >"$work_dir/initdb.log" 2>&1 \
    || { cat "$work_dir/initdb.log" >&2; fail "initdb failed (log above)"; }

cat >"$rootfs$DATA_DIR/pg_hba.conf" <<'EOF'
# The soak's image: trust, because the server is reachable from this machine only.
local all         all           trust
host  all         all 127.0.0.1/32 trust
host  all         all ::1/128   trust
# Bridge networking: the port is published on the host's 127.0.0.1 and connections arrive from
# the bridge's gateway, on the container's own subnet. With host networking the server listens
# on 127.0.0.1 only, so this line admits nothing more.
host  all         all samenet   trust
local replication all           trust
host  replication all 127.0.0.1/32 trust
EOF
chown "$postgres_uid:$postgres_gid" "$rootfs$DATA_DIR/pg_hba.conf"

cat >"$rootfs$ENTRYPOINT" <<EOF
#!/bin/sh
# The soak's PostgreSQL $PG_MAJOR: initdb ran when the image was built. Runs postgres in the
# foreground on \$PGPORT, on 127.0.0.1, logging to stderr. Arguments are more postgres options
# (\`-c name=value\`) and win over these; a leading \`postgres\` (the official image's style) is
# dropped, so the same command line suits both images.
set -eu
if [ "\${1:-}" = postgres ]; then shift; fi
exec /usr/lib/postgresql/$PG_MAJOR/bin/postgres -D "\${PGDATA:-$DATA_DIR}" \\
    -c port="\${PGPORT:-5432}" -c listen_addresses=127.0.0.1 \\
    -c unix_socket_directories=/run/postgresql \\
    -c logging_collector=off -c log_destination=stderr "\$@"
EOF
chmod 0755 "$rootfs$ENTRYPOINT"

# Nothing the server needs: package caches, lists and documentation (about 100 MB).
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*

tar --numeric-owner --xattrs -C "$rootfs" \
    --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -c . \
    | docker import \
        --change "ENTRYPOINT [\"$ENTRYPOINT\"]" \
        --change 'USER postgres' \
        --change "ENV PGDATA=$DATA_DIR" \
        --change 'ENV PGPORT=5432' \
        --change "LABEL $RECIPE_LABEL=$recipe_hash" \
        --message "queen-soak: postgresql-$PG_MAJOR from debootstrap $suite ($mirror)" \
        - "$IMAGE" >/dev/null
say "built $IMAGE in ${SECONDS} s (size $(docker image inspect "$IMAGE" --format "{{ .Size }}" | numfmt --to=iec), $RECIPE_LABEL=$recipe_hash)"
