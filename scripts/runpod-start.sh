#!/usr/bin/env bash
# The start command of a RunPod-style pod: optional sshd, then the launcher in container mode as the
# pod's main process (exec: it receives SIGTERM itself and reaps vLLM's orphans).
#   VLLM_LAUNCH_PROFILE   the profile (default /workspace/vllm-launch.yaml)
#   VLLM_LAUNCH_SET       overrides, ';'-separated: vllm.max-model-len=32768;vllm.gpu-memory-utilization=0.9
#   PUBLIC_KEY            an SSH public key: sshd is started when it is set and sshd is installed
#   VLLM_LAUNCH_BIN       the launcher (default: vllm-launch on PATH)
set -euo pipefail
if [ -n "${PUBLIC_KEY:-}" ] && command -v sshd >/dev/null 2>&1; then
    mkdir -p ~/.ssh && chmod 700 ~/.ssh
    printf '%s\n' "$PUBLIC_KEY" >> ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys
    command -v ssh-keygen >/dev/null 2>&1 && ssh-keygen -A >/dev/null 2>&1 || true
    sshd || echo "runpod-start: sshd did not start; continuing without it" >&2
fi
export VLLM_LAUNCH_PROFILE="${VLLM_LAUNCH_PROFILE:-/workspace/vllm-launch.yaml}"
exec "${VLLM_LAUNCH_BIN:-vllm-launch}" up --container "$@"
