"""The fake `vllm` (tests/fakes/vllm): a real captured vLLM log replayed by vLLM's process tree.

Where a supervisor can see it, it behaves like `vllm serve` of vLLM 0.32:

Process tree
    The `vllm serve` process is the API server. When the replayed log reaches the engine's start (its first
    line holding `EngineCore`, `Initializing` or `Started engine process`; the start of the replay when
    none does) it starts `VLLM::EngineCore`; with `--tensor-parallel-size N` / `-tp N` (N > 1) the engine
    starts `VLLM::Worker_TP0` .. `VLLM::Worker_TP<N-1>`. Each is a fresh interpreter whose whole
    command line is its title and whose comm is set with prctl(PR_SET_NAME), so psutil's name() and
    cmdline()[0] are the title, as with vLLM's setproctitle. All stay in the API server's process group and
    session and inherit its environment (FAKE_VLLM_TAG included). The API server waits for the engine's
    handshake (the tree is up) before it serves. The engine creates `$FAKE_VLLM_STATE/shm-<engine pid>`
    at start (its shared memory) and removes it at the end of an orderly shutdown.

Signals and ends
    API server: SIGTERM (and SIGINT) follow `ignore_term`. Honoured while serving: it prints vLLM's
    shutdown lines, SIGTERMs the engine, waits for it and exits 0. Honoured before that (ignore_term
    false): it stops the engine and exits 143. Every orderly end (after: exit/exit0, an error) stops the
    engine first; a SIGKILLed API server leaves the engine and its workers running as orphans.
    EngineCore: ignores SIGINT and SIGHUP; on SIGTERM it stops its workers, takes engine_cleanup_s,
    removes its shm marker, releases its GPU memory and exits 0. It never watches its parent.
    Workers: exit on SIGTERM and when their engine is gone (parent pid checked every 0.1 s).
    Engine death (SIGKILL, or die_after_s): the API server notices at once (a thread waits on the child).
    While serving it prints the EngineDeadError lines, answers /health 503 and POSTs 500 for
    engine_dead_linger_s, then exits 0, as vLLM 0.32 does. Before it served: "Engine core
    initialization failed" and exit 1.

HTTP (from "Application startup complete" on; threaded, so /health answers while a request hangs)
    GET /health, /v1/models (with max_model_len), /metrics, /version; POST /v1/completions,
    /v1/chat/completions and /tokenize. With VLLM_API_KEY set, /v1 paths need `Authorization: Bearer <key>`
    (401 otherwise). With `--ssl-certfile` (and `--ssl-keyfile`) it serves HTTPS only, as uvicorn does.
    Routing ignores the query string. Every request logs uvicorn's access line,
    `(APIServer pid=P) INFO:     <client ip>:<client port> - "GET <raw target as sent> HTTP/1.1" 200 OK`;
    with `--enable-log-requests`, a completion first logs vLLM's `Received request cmpl-…` (chatcmpl-… for
    chat) record with the prompt as repr() shows it (a client's newlines arrive escaped as \\n).
    /tokenize ({"model", "prompt"} or {"model", "messages", "add_generation_prompt" (true), "tools"}) answers
    vLLM 0.32's {"count", "max_model_len", "tokens", "token_strs"}; the fake's tokenizer counts one token per
    whitespace-separated word and per ChatML special token (<|im_start|>, <|im_end|>); messages are counted
    as the ChatML prompt (each message is its words + 3: <|im_start|>, the role, <|im_end|>; the generation
    prompt adds 2). Tools are counted as a template that renders them would: a first system block of their
    JSON, one line each, in <tools> tags (the whitespace-separated words of it); an assistant's tool_calls
    follow its content as <tool_call> JSON, a `tool` message is a user turn in <tool_response> tags
    (fakevllm/tokens.py). A chat with "stream": true streams vLLM 0.32's SSE chunks (fakevllm/stream.py):
    the role chunk and the first token after the prefill, one chunk per output token (max_completion_tokens,
    else max_tokens, else 16: it always generates them all, as with ignore_eos; the last has finish_reason
    "length"; with tools, as `tool_reply` says), the usage chunk with stream_options.include_usage
    (prompt_tokens: the /tokenize count of the messages and tools), then `data: [DONE]`; an engine that dies
    mid-stream sends EngineDeadError's error chunk and [DONE] and closes the connection. Timing:
    fakevllm/scheduler.py. Non-streamed answers are one JSON document after completion_s.

Scenario rules come from the JSON file in $FAKE_VLLM_SCENARIOS: a list of objects; the first whose
`when` substring occurs in the argv (and whose `max_uses` is not used up) applies. Keys (default: meaning):
    when            none: a substring of the joined argv that selects the rule
    max_uses        none: apply the rule to at most N launches (counted in $FAKE_VLLM_STATE)
    log             none: the log to replay; relative paths are under tests/data/logs
    after           "serve" when the log reaches readiness, else "exit": what to do when the log ends:
                    serve, exit (with exit_code), exit0, hang (never exits by itself; SIGTERM changes nothing),
                    crash (the engine dies at once; the API server prints its death lines, then takes
                    linger_s (20) to exit 1, as vLLM 0.32's does after a start-up failure; with
                    crash_lines false it prints nothing and stays silent until then)
    mark_line       none: mark `fatal_printed` when the replay prints line N (0-based) of the log
    exit_code       1: the exit status for after: exit
    time_scale      0.01: multiply the log's own delays (from its timestamps) by this ...
    max_delay_s     0.2: ... and cap each delay at this
    ignore_term     "startup": SIGTERM is ignored until "Application startup complete" is printed, as
                    vLLM ignores it while its engine starts; false: honoured at once; true: always ignored
    grandchild      false: true starts an extra process in the group; "setsid": one that escapes it;
                    "double-fork": one that leaves the tree as well (its parent exits; setsid);
                    "setsid-on-stop": a "setsid" one started by the orderly shutdown (after SIGTERM),
                    which the API server's exit leaves to the nearest subreaper
    die_after_s     none: the engine exits 1 by itself this long after serving began (no cleanup: the shm
                    marker stays; its GPU memory is still given back release_delay_s later)
    engine_cleanup_s 0.3: how long the engine's orderly shutdown takes (the shm marker goes at its end)
    engine_dead_linger_s 0.5: how long a server with a dead engine answers 503/500 before it exits 0
    wedge_after_s   none: this long after serving began, completions never answer (they block until the
                    process ends, counted as waiting) while /health still answers 200 and the token counter stays flat
    completion_s    0: how long each non-streamed completion holds one of the --max-num-seqs slots (default
                    256); the others wait. /metrics serves vllm:num_requests_running/_waiting and a climbing
                    vllm:generation_tokens_total (tokens_per_s, 200, per running non-streamed request; a
                    streamed chat adds each token it sends), as vLLM 0.32 does
    token_s         0: a streamed chat's time per output token with one request running; with R requests
                    holding a slot at that step, token_s * (1 + batch_slowdown * (R - 1))
    batch_slowdown  0: how much each further running request slows every token step (see token_s)
    prefill_s_per_1k 0: prefill time per 1000 prompt tokens. A streamed chat prefills in scheduler steps of
                    at most --max-num-batched-tokens (default 8192) prompt tokens shared evenly by the
                    requests prefilling then; a step lasts one token step plus prefill_s_per_1k per 1000
                    tokens in it, so a small budget makes concurrent long prompts take more steps. TTFT is
                    the slot wait plus the prefill; with both keys 0 a stream answers at once
    progress_bar    none: {"before": regex, "steps": N (4), "interval_s": X (0.05)}: just before the first
                    replayed line matching the regex ("" or absent: before the first line), a tqdm bar
                    (`Loading safetensors checkpoint shards:  25% Completed | 1/4 [...]`) redrawn N+1 times
                    with \\r and no newline between redraws, each flushed X s apart, then one \\n
    download        none: {"before": regex ("": at the start), "bytes": B (1 MiB), "seconds": S (1.0),
                    "chunks": K (4)}: print nothing for S seconds while writing B bytes in K chunks to
                    <hub cache>/models--<org>--<name>/blobs/fake-download.incomplete (the model is argv[1]
                    after `serve`; the hub cache is HF_HUB_CACHE, HF_HOME/hub, XDG_CACHE_HOME/huggingface/hub
                    or ~/.cache/huggingface/hub); the file stays when done
    gpu_memory      none: bytes (int) or a size ("20GiB", "512MiB") held on each device the tree uses,
                    registered in $FAKE_VLLM_INVENTORY (protocol: fakevllm/gpu.py)
    release_delay_s 0: after an orderly exit the memory stays held this long (`held_until`)
    tool_reply      "parsed": how a chat with `tools` is answered (without --enable-auto-tool-choice, tool_choice
                    auto gets vLLM 0.32's 400, streamed or not): parsed (tool_calls; streamed: vLLM 0.32's
                    delta.tool_calls pieces, the id, type and name, then the arguments, finish_reason
                    tool_calls), hermes_text or qwen3_coder_text (the call left in content in that family's
                    markup, as a parser that cannot read it leaves it), prose (streamed: as content chunks,
                    finish_reason stop); the fake calls the first tool, "x" for each required parameter
    hide            none: a regex; replayed lines it matches are not printed (a logging level that hides them)
Without a scenario file the legacy variables give the same keys: FAKE_VLLM_LOG, FAKE_VLLM_AFTER,
FAKE_VLLM_EXIT (exit_code), FAKE_VLLM_IGNORE_TERM (1/true, startup, 0/false), FAKE_VLLM_GRANDCHILD
(1, setsid), FAKE_VLLM_TIME_SCALE.

Other environment variables
    FAKE_VLLM_STATE      where max_uses counters and shm markers go (default: the scenario file's folder)
    FAKE_VLLM_ARGV_LOG   every launch appends {"argv", "time", "pid", "has_api_key"} as a JSON line
    FAKE_VLLM_EVENTS     timing marks as JSON lines: started, fatal_printed, engine_started, engine_exited,
                         engine_died, engine_dead_seen, wedged, download_started, download_finished
    FAKE_VLLM_INVENTORY  the JSON inventory file that gpu_memory is registered in
    FAKE_VLLM_VERSION    what `vllm --version` prints (0.32.0)
    FAKE_VLLM_VERSION_DELAY_S  how long `vllm --version` takes first (0; real vLLM imports torch)
    FAKE_VLLM_TAG        not read: the harness finds every process of a test by it (it is inherited)
`vllm serve --help=all` prints vLLM 0.32's help text (tests/data/help).

Multi-node (`--nnodes N --node-rank R --master-addr A --master-port P`): the head (rank 0) listens on A:P
and serves only once the other N-1 ranks have connected; a rank that drops while serving kills its engine
(EngineDeadError, exit 0). `--headless` runs a worker rank: it prints the scenario's log (a real headless
worker's), starts its engine, connects to the head (retrying while it starts) and exits 1 when the head
goes away; SIGTERM ends it with 0 (multinode.py).

Modules: apiserver (the replay, the signals, the ends), engine (EngineCore and workers), multinode (the
ranks), server (HTTP and the access and request logs), scheduler (slots, prefill and token timing, the
/metrics counters), stream (the SSE chunks), tokens (the tokenizer and chat template), effects (progress
bar, download), gpu (the inventory protocol), scenario (the rules), common (output, argv, names).
Standard library only: the fake runs under whatever `python3` is first on PATH.
"""
