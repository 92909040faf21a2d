# vllm-launch on the official vLLM OpenAI-compatible image. tini is PID 1 and forwards signals; the launcher
# runs in container mode: a profile that can never work keeps the pod up with a page that says why.
#   docker build -t vllm-launch:v0.32.0 .     (the tag `render lws` uses by default)
#   docker run --gpus all -p 8000:8000 -v /data/workspace:/workspace \
#     -e VLLM_LAUNCH_PROFILE=/workspace/qwen3.yaml -e VLLM_API_KEY=... vllm-launch:v0.32.0
# A vLLM release, never a floating tag: the release whose flags the launcher ships (launcher/config/flags.py
# SHIPPED_VERSION; a test keeps the two equal). Another: --build-arg VLLM_VERSION=v0.x.y
ARG VLLM_VERSION=v0.32.0
FROM vllm/vllm-openai:${VLLM_VERSION}
RUN apt-get update && apt-get install -y --no-install-recommends tini && rm -rf /var/lib/apt/lists/*
COPY . /opt/vllm-launch
RUN pip install --no-cache-dir /opt/vllm-launch && cp /opt/vllm-launch/scripts/runpod-start.sh /usr/local/bin/runpod-start
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["runpod-start"]
