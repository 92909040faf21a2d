# vllm-launch on the official vLLM OpenAI-compatible image. tini is PID 1 and forwards signals; the launcher
# runs in container mode: a profile that can never work keeps the pod up with a page that says why.
#   docker build -t vllm-launch .
#   docker run --gpus all -p 8000:8000 -v /data/workspace:/workspace \
#     -e VLLM_LAUNCH_PROFILE=/workspace/qwen3.yaml -e VLLM_API_KEY=... vllm-launch
FROM vllm/vllm-openai:latest
RUN apt-get update && apt-get install -y --no-install-recommends tini && rm -rf /var/lib/apt/lists/*
COPY . /opt/vllm-launch
RUN pip install --no-cache-dir /opt/vllm-launch && cp /opt/vllm-launch/scripts/runpod-start.sh /usr/local/bin/runpod-start
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["runpod-start"]
