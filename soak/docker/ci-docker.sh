#!/usr/bin/env bash
# CI's Docker step: the soak's testcontainers path, exercised rather than assumed.
#
#   soak/docker/ci-docker.sh [COMMAND ARGS...]
#
# Installs docker.io when dockerd is missing, starts `dockerd --bridge=none --iptables=false`
# (no bridge, no firewall rules: containers use the host network, so all traffic stays on
# 127.0.0.1), builds or reuses the PostgreSQL image (build-image.sh), runs the Docker provider's
# test with QUEEN_SOAK_DOCKER=1, then runs COMMAND, if given, with QUEEN_SOAK_DOCKER=1, e.g.
#   soak/docker/ci-docker.sh ./target/release/soak --smoke --provider docker
# It stops the daemon it started, and only that one, however it exits. An engine that already
# answers is used as it is and left running.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Bounds: dockerd answers in about 1 s here; a fast shutdown takes about 1 s.
readonly DOCKERD_START_POLLS=120 # × 0.5 s
readonly DOCKERD_STOP_POLLS=60   # × 0.5 s, then SIGKILL
readonly DOCKER_ANSWER_SECONDS=10
readonly DOCKERD_LOG="${TMPDIR:-/tmp}/queen-soak-dockerd.log"

say() { echo "ci-docker: $*"; }

engine_answers() { timeout "$DOCKER_ANSWER_SECONDS" docker info >/dev/null 2>&1; }

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    say "dockerd missing; installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q docker.io
fi

dockerd_pid=""
stop_dockerd() {
    [[ -n "$dockerd_pid" ]] || return 0
    say "stopping the dockerd it started (pid $dockerd_pid)"
    kill -TERM "$dockerd_pid" 2>/dev/null || return 0
    for _ in $(seq "$DOCKERD_STOP_POLLS"); do
        kill -0 "$dockerd_pid" 2>/dev/null || { dockerd_pid=""; return 0; }
        sleep 0.5
    done
    say "dockerd did not stop within $((DOCKERD_STOP_POLLS / 2)) s; killing it"
    kill -KILL "$dockerd_pid" 2>/dev/null || true
    dockerd_pid=""
}
trap stop_dockerd EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if engine_answers; then
    say "a Docker engine already answers; using it and leaving it running"
else
    say "starting dockerd --bridge=none --iptables=false (log: $DOCKERD_LOG)"
    dockerd --bridge=none --iptables=false >"$DOCKERD_LOG" 2>&1 &
    dockerd_pid=$!
    for _ in $(seq "$DOCKERD_START_POLLS"); do
        engine_answers && break
        if ! kill -0 "$dockerd_pid" 2>/dev/null; then
            dockerd_pid=""
            tail -n 30 "$DOCKERD_LOG" >&2
            say "dockerd exited during start-up (log above)"
            exit 1
        fi
        sleep 0.5
    done
    if ! engine_answers; then
        tail -n 30 "$DOCKERD_LOG" >&2
        say "dockerd did not answer within $((DOCKERD_START_POLLS / 2)) s (log above)"
        exit 1
    fi
    say "dockerd answers: $(docker version --format 'server {{.Server.Version}}, API {{.Server.APIVersion}}')"
fi

soak/docker/build-image.sh

say "the Docker provider's test, through testcontainers"
QUEEN_SOAK_DOCKER=1 cargo test -p queen-soak --test docker_provider -- --nocapture

if (($# > 0)); then
    say "running with QUEEN_SOAK_DOCKER=1: $*"
    QUEEN_SOAK_DOCKER=1 "$@"
fi
