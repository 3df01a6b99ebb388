"""The cause classifier's rules (pipeline.causes) on small outputs made for each rule: chained tracebacks,
process and log prefixes, errors over warnings, which of two causes wins, certain or not at the first
crash, status's words free of the log's text, memory that stays bounded whatever is fed, and a command's
start that compiles no catalog. The real logs are in test_causes_corpus.py."""

from __future__ import annotations

import json
import string
import subprocess
import sys

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.causes import UNKNOWN, Cause, Scanner, classify
from pipeline.causes.catalog import BY_KIND, CATALOG, FIELD_TYPES, KINDS, gate, needles, valid_field
from pipeline.causes.scan import MAX_LINE, MAX_STREAMS, MEMO_ENTRIES, MEMO_LINE

OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "79.15 GiB of which 1.50 GiB is free. Including non-PyTorch memory, this process has 77.64 GiB memory in use."
)
WRAPPER = "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"


def traceback(*exception: str, frame: str = "vllm/worker.py") -> list[str]:
    return [
        "Traceback (most recent call last):",
        f'  File "/usr/lib/python3.12/site-packages/{frame}", line 12, in load',
        "    model = load_model(config)",
        *exception,
    ]


def chained(root: list[str], *wrappers: str, how: str = "cause") -> list[str]:
    marker = (
        "The above exception was the direct cause of the following exception:"
        if how == "cause"
        else "During handling of the above exception, another exception occurred:"
    )
    lines = list(root)
    for wrapper in wrappers:
        lines += ["", marker, "", *traceback(wrapper, frame="vllm/engine.py")]
    return lines


def found(lines: list[str]) -> tuple[str, int | None]:
    cause = classify(lines)
    return cause.kind, cause.line_number


# Python's chained tracebacks: the root is the first exception of a chain


@pytest.mark.parametrize("how", ["cause", "context"])
def test_the_root_of_a_chain_is_chosen_not_its_wrapper(how: str) -> None:
    lines = chained(traceback(OOM), "RuntimeError: Worker failed with error 'boom'", WRAPPER, how=how)
    cause = classify(lines)
    assert (cause.kind, cause.line_number) == ("gpu_oom", 4)
    assert cause.line == OOM


def test_a_wrapper_alone_is_unknown() -> None:
    assert classify(traceback(WRAPPER)) == UNKNOWN
    assert classify(["ERROR 09-28 15:47:24 [core.py:718] EngineCore failed to start.", WRAPPER]) == UNKNOWN


def test_an_unclassified_root_leaves_the_first_classified_exception_of_its_chain() -> None:
    lines = chained(
        traceback("KeyError: 'qwen9'"),
        "ValueError: The checkpoint you are trying to load has model type `qwen9` but Transformers does not "
        "recognize this architecture.",
    )
    cause = classify(lines)
    assert cause.kind == "unsupported_model"
    assert cause.line_number == len(lines)
    assert cause.words() == "the model architecture qwen9 is not supported by this engine version"


def test_a_multi_line_message_adds_its_fields_to_the_line_used() -> None:
    lines = traceback(
        "huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-abc)",
        "",
        "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.",
        "Access to model meta-llama/Llama-3.1-8B is restricted. You must have access to it and be authenticated.",
    )
    cause = classify(lines)
    assert (cause.kind, cause.line_number) == ("model_access_denied", 4)
    assert cause.words() == (
        "the model meta-llama/Llama-3.1-8B is gated or private: the Hugging Face token is missing or has no access"
    )


def test_a_traceback_python_says_it_ignored_never_classifies() -> None:
    ignored = [
        "Exception ignored in: <function Worker.__del__ at 0x7f>",
        *traceback("ImportError: sys.meta_path is None, Python is likely shutting down"),
    ]
    assert classify(ignored) == UNKNOWN
    atexit = ["Error in atexit._run_exitfuncs:", *traceback("ModuleNotFoundError: No module named 'x'")]
    assert classify(atexit) == UNKNOWN


def test_another_threads_exception_gives_way_to_an_error_of_the_process() -> None:
    thread = [
        "Exception in thread Thread-3 (_report_usage_worker):",
        *traceback("PermissionError: [Errno 13] Permission denied: '/.config'"),
    ]
    assert found(thread) == ("permission_denied", 5)  # nothing else: it may be the cause
    died = ["ERROR 05-01 10:00:00 [core.py:1] OSError: [Errno 28] No space left on device: '/.triton/x'"]
    assert found([*thread, *died]) == ("disk_full", 6)


def test_source_lines_in_the_frames_are_never_the_line_used() -> None:
    lines = [
        'ERROR 11-18 18:07:28 engine.py:366]   File "/x/vllm/worker/worker.py", line 493, in check',
        'ERROR 11-18 18:07:28 engine.py:366]     raise ValueError("No available memory for the cache blocks. "',
        "ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing",
    ]
    assert found(lines) == ("kv_cache_insufficient", 3)


# Process and log prefixes


def test_vllm_process_prefixes_and_log_records_are_read_through() -> None:
    prefix = "(EngineCore_DP0 pid=17374) ERROR 09-28 15:47:24 [core.py:718] "
    lines = [
        "(APIServer pid=1) INFO 09-28 15:46:01 [api_server.py:1805] vLLM API server version 0.10.2",
        *(prefix + line for line in traceback(OOM)),
        "(APIServer pid=1) Traceback (most recent call last):",
        '(APIServer pid=1)   File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core_client.py", line 1, in x',
        f"(APIServer pid=1) {WRAPPER}",
    ]
    cause = classify(lines)
    assert (cause.kind, cause.line_number) == ("gpu_oom", 5)
    assert cause.line == prefix + OOM  # exactly as given, prefixes and all
    assert dict(cause.fields) == {"requested": "2.00 GiB", "total": "79.15 GiB", "free": "1.50 GiB"}


def test_a_traceback_after_a_message_goes_on_in_lines_of_its_own() -> None:
    lines = [
        "[2025-04-17 16:15:33 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/sglang/srt/managers/scheduler.py", line 2070, in run',
        "    scheduler.event_loop_normal()",
        OOM,
        "",
        "[2025-04-17 16:15:33] Received sigquit from a child process. It usually means the child failed.",
    ]
    assert found(lines) == ("gpu_oom", 4)


def test_a_traceback_logged_line_by_line_is_one_record_whatever_the_times() -> None:
    lines = [
        f"2025-06-06T19:02:34.{n:03d}Z DEBUG dynamo_run::subprocess: {line}"
        for n, line in enumerate(traceback(OOM), start=250)
    ]
    assert found(lines) == ("gpu_oom", 4)  # the relay's level is not the line's


def test_interleaved_ranks_keep_their_own_tracebacks() -> None:
    lines = [
        "[rank1]: Traceback (most recent call last):",
        "[rank0]: Traceback (most recent call last):",
        "",
        '[rank1]:   File "/x/text_generation_server/server.py", line 225, in serve_inner',
        '[rank0]:   File "/x/text_generation_server/server.py", line 225, in serve_inner',
        "[rank1]:     model = get_model(",
        "",
        "[rank0]: AssertionError",
        f"[rank1]: {OOM}",
        " rank=1",
    ]
    assert found(lines) == ("gpu_oom", 9)


@pytest.mark.parametrize(
    "line",
    [
        "(VllmWorker rank=1 pid=123) ERROR 04-23 14:42:53 [multiproc_executor.py:470] " + OOM,
        "(RayWorkerWrapper pid=11305, ip=10.0.0.2) ERROR 08-27 05:12:18 worker_base.py:382] " + OOM,
        "[2025-03-01 10:00:00 TP0] " + OOM,
        "[07/08/2025-19:47:15] [TRT-LLM] [RANK 1] [E] " + OOM,
        "[TensorRT-LLM][ERROR] " + OOM,
        "2024-06-17T13:18:29.371622Z ERROR shard-manager: text_generation_launcher: " + OOM,
        "2025-05-21T12:00:00.000Z ERROR dynamo_runtime::worker: " + OOM,
        "E1128 16:31:49.479096 227 backend_model.cc:634] " + OOM,
        "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] " + OOM,
        "\x1b[31mERROR\x1b[0m 09-28 15:47:24 [core.py:718] " + OOM,
        json.dumps({"time": "2025-10-08T13:03:51Z", "level": "ERROR", "message": OOM}),
    ],
)
def test_each_engines_prefixes_say_an_error(line: str) -> None:
    assert found([line]) == ("gpu_oom", 1)


@pytest.mark.parametrize(
    "line",
    [
        "WARNING 09-28 15:47:24 [worker.py:1] " + OOM,
        "[TRT-LLM] [W] " + OOM,
        "2024-06-17T13:18:29Z  WARN text_generation_launcher: " + OOM,
        json.dumps({"level": "warning", "message": OOM}),
        "/opt/x/torch/cuda/__init__.py:129: UserWarning: " + OOM,
        "[W423 14:42:53.235590780 ProcessGroupNCCL.cpp:1497] Warning: NCCL error: unhandled system error",
        "node1:3663:4044 [0] NCCL WARN NCCL error: unhandled system error, retrying",
        "INFO 09-28 15:47:24 [gpu.py:1] " + OOM,
    ],
)
def test_a_warning_never_classifies(line: str) -> None:
    assert classify([line]) == UNKNOWN


# Errors over warnings; which of two causes wins


def test_a_fallback_is_not_a_cause() -> None:
    assert classify(["CUDA is not available, using CPU for the tokenizer"]) == UNKNOWN
    assert found(["ImportError: CUDA is not available"]) == ("gpu_unavailable", 1)


def test_an_error_wins_over_earlier_warnings_that_mention_another_cause() -> None:
    lines = [
        "WARNING 04-23 14:42:53 [utils.py:1] CUDA out of memory while profiling; retrying with a smaller batch",
        "node1:1:2 [0] NCCL WARN Connect to 10.0.0.3<40135> failed : Connection refused, retrying",
        "WARNING 04-23 14:42:54 [hf.py:1] 403 Client Error: Forbidden for url: https://huggingface.co/x/y/resolve/main/a",
        "ERROR 04-23 14:42:55 [core.py:1] OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/x'",
    ]
    assert found(lines) == ("disk_full", 4)


def test_between_two_errors_of_the_same_rank_the_first_wins() -> None:
    lines = [*traceback("OSError: [Errno 98] Address already in use"), *traceback(OOM)]
    assert found(lines) == ("port_in_use", 4)


def test_an_exception_of_a_traceback_beats_an_error_line() -> None:
    lines = ["ERROR 04-23 14:42:53 [x.py:1] Failed to connect to NATS: connection refused", *traceback(OOM)]
    assert found(lines) == ("gpu_oom", 5)


def test_an_error_line_beats_a_line_that_says_no_level() -> None:
    lines = ["OSError: [Errno 28] No space left on device", "ERROR 04-23 14:42:53 [x.py:1] " + OOM]
    assert found(["the run printed: CUDA out of memory", "OSError: [Errno 28] No space left on device"]) == (
        "disk_full",
        2,
    )
    assert found(lines) == ("disk_full", 1)  # an exception line outside a traceback is an error line too


def test_nccl_errors_give_way_to_the_cause_another_rank_printed() -> None:
    nccl = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
    lines = [*traceback(nccl), "[rank0]: the load printed CUDA out of memory before it died"]
    assert found(lines) == ("gpu_oom", 5)
    assert found(traceback(nccl)) == ("nccl_failure", 4)


def test_a_shm_failure_sharpens_the_nccl_error_it_explains_even_as_a_warning() -> None:
    shm = "node1:1:2 [0] NCCL WARN Error while creating shared memory segment /dev/shm/nccl-Ab (size 9637888)"
    nccl = "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:81, unhandled system error"
    cause = classify([shm, *traceback(nccl)])
    assert (cause.kind, cause.line_number) == ("shm_exhausted", 1)
    assert dict(cause.fields) == {"size": "9637888"}
    assert cause.words() == (
        "/dev/shm is too small for NCCL or the engine's shared memory (a segment of 9637888 bytes could not be created)"
    )
    assert found([*traceback(nccl, "ncclSystemError: System call failed.", "Last error:", shm[22:])]) == (
        "shm_exhausted",
        7,
    )


def test_an_nccl_warn_with_the_trail_of_an_error_is_an_error_and_one_without_is_a_retry() -> None:
    warn = "node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to 10.0.0.4<56849> returned 113"
    trail = ["node5:240:240 [6] NCCL INFO misc/socket.cc:570 -> 2", "node5:240:240 [6] NCCL INFO init.cc:1534 -> 2"]
    assert classify([warn, "node5:240:240 [6] NCCL INFO Connected all rings"]) == UNKNOWN
    assert found([warn, *trail]) == ("nccl_failure", 1)
    shm = "node1:1:2 [0] NCCL WARN Call to posix_fallocate failed : No space left on device /dev/shm/nccl-x"
    assert found(["node1:1:2 [0] NCCL WARN Connect to 10.0.0.3<40135> failed, retrying", shm, *trail]) == (
        "shm_exhausted",
        2,
    )


@pytest.mark.parametrize(
    "line",
    [
        "2023-07-20T12:31:14.506674Z  WARN text_generation_launcher: Could not import Flash Attention enabled "
        "models: No module named 'vllm_cache_ops'",
        "/x/huggingface_hub/file_download.py:651: UserWarning: Not enough free disk space to download the file. The "
        "expected file size is: 4915.92 MB. The target location /models/blobs only has 748.94 MB free disk space.",
    ],
)
def test_a_warning_that_names_a_failure_is_read_as_a_line_without_level(line: str) -> None:
    cause = classify([line])
    assert cause.line_number == 1
    assert cause.kind in ("import_error", "disk_full")
    assert classify([line, *traceback(OOM)]).kind == "gpu_oom"  # an error outranks it


def test_a_bare_401_from_the_hub_is_confirmed_by_its_chain_or_replaced() -> None:
    http = "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: https://huggingface.co/org/m/resolve/main/config.json"
    assert found(traceback(http)) == ("model_access_denied", 4)
    gated = chained(
        traceback(http), "huggingface_hub.errors.GatedRepoError: 401 Client Error. Cannot access gated repo"
    )
    assert found(gated) == ("model_access_denied", 4)  # the same class: the first line stays the one used
    missing = chained(traceback(http), "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error.")
    assert found(missing) == ("model_not_found", len(missing))


# Certain at the first crash, or not


SAMPLES = {
    "gpu_oom": OOM,
    "kv_cache_insufficient": "ValueError: To serve at least one request with the model's max seq len (131072), (16.0 "
    "GiB KV cache is needed, which is larger than the available KV cache memory (3.12 GiB). Based on the available "
    "memory, the estimated maximum model length is 7740.",
    "model_access_denied": "OSError: You are trying to access a gated repo. Access to model meta-llama/Llama-3.1-8B "
    "is restricted.",
    "model_not_found": "OSError: meta-llama/Llama-9-8B is not a local folder and is not a valid model identifier "
    "listed on 'https://huggingface.co/models'",
    "bad_argument": "vllm serve: error: unrecognized arguments: --max-model-length 4096",
    "unsupported_model": "ValueError: Model architectures ['FooForCausalLM'] are not supported for now.",
    "gpu_unavailable": "RuntimeError: No CUDA GPUs are available",
    "shm_exhausted": "RuntimeError: unable to write to file </torch_18693_1945363223_0>: No space left on device (28)",
    "nccl_failure": "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    "dependency_unreachable": "Exception: Failed to connect to NATS: IO error: Connection refused (os error 111)",
    "port_in_use": "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already "
    "in use",
    "disk_full": "OSError: [Errno 28] No space left on device: '/root/.cache/huggingface/hub/x'",
    "import_error": "ModuleNotFoundError: No module named 'vllm._C'",
    "permission_denied": "PermissionError: [Errno 13] Permission denied: '/root/.cache/huggingface'",
}
CERTAIN = {
    "model_access_denied",
    "model_not_found",
    "bad_argument",
    "unsupported_model",
    "gpu_unavailable",
    "import_error",
}
AT_STARTUP = {"gpu_oom", "kv_cache_insufficient"}


def test_every_class_has_a_sample() -> None:
    assert set(SAMPLES) | {"unknown"} == set(KINDS)


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_certain_at_the_first_crash_as_the_issue_lists(kind: str) -> None:
    cause = classify(traceback(SAMPLES[kind]))
    assert cause.kind == kind
    assert cause.certain == (kind in CERTAIN | AT_STARTUP)
    served = classify(["INFO:     Application startup complete.", *traceback(SAMPLES[kind])])
    assert served.kind == kind
    assert served.certain == (kind in CERTAIN), "a start-up cause after the server served is not certain"


@pytest.mark.parametrize(
    "marker",
    [
        "INFO:     Application startup complete.",
        "(APIServer pid=1) INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
        "[2025-03-01 10:00:05] The server is fired up and ready to roll!",
        "2024-06-17T13:20:00.000000Z  INFO text_generation_router::server: router/src/server.rs:1935: Connected",
    ],
)
def test_each_engines_serving_line_makes_a_later_oom_not_certain(marker: str) -> None:
    cause = classify([marker, *traceback(OOM)])
    assert (cause.kind, cause.certain) == ("gpu_oom", False)


def test_an_error_before_the_server_served_did_not_stop_it() -> None:
    early = "ERROR 04-23 14:42:53 [x.py:1] Failed to connect to etcd server, retrying"
    assert classify([early, "INFO:     Application startup complete."]) == UNKNOWN
    assert found([early, "INFO:     Application startup complete.", *traceback(OOM)]) == ("gpu_oom", 6)


def test_a_serving_line_inside_a_traceback_does_not_count() -> None:
    lines = traceback("ValueError: the test said Application startup complete", frame="uvicorn/x.py")
    assert classify([*lines, *traceback(OOM)]).certain


# Status's words: the class and the fields, never the line


TOKEN_ALPHABET = string.ascii_letters + string.digits


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(sorted(SAMPLES)),
    token=st.text(TOKEN_ALPHABET, min_size=20, max_size=40).map(lambda t: "hf_" + t),
    where=st.floats(0, 1),
)
def test_a_token_in_the_log_never_reaches_the_words(kind: str, token: str, where: float) -> None:
    sample = SAMPLES[kind]
    for at in {int(where * len(sample)), sample.find("meta-llama"), sample.find("/root")}:
        if at < 0:
            continue
        line = sample[:at] + token + sample[at:]
        cause = classify(traceback(line))
        assert token not in cause.words()
        assert all(token not in value for _, value in cause.fields)


@pytest.mark.parametrize(
    "line",
    [
        "Exception: Failed to connect to NATS at nats://nats:hf_Zx81kQ2pLmN0vB7cD4eF@nats.dynamo:4222: refused",
        "Exception: Failed to connect to etcd server at http://root:s3cretpass@etcd:2379",
        "OSError: [Errno 13] Permission denied: '/var/run/secrets/token'",
        "Access to model hf_Zx81kQ2pLmN0vB7cD4eFgH is restricted",
    ],
)
def test_secrets_in_urls_and_paths_are_dropped_from_the_fields(line: str) -> None:
    cause = classify([line])
    assert cause.kind != "unknown"
    words = cause.words()
    for secret in ("hf_Zx81kQ2pLmN0vB7cD4eF", "s3cretpass", "nats:hf_", "root:", "secrets/token"):
        assert secret not in words
    assert line not in words


def test_words_are_built_from_the_class_and_the_fields_alone() -> None:
    for kind, sample in SAMPLES.items():
        cause = classify(traceback(sample))
        assert sample not in cause.words()
        again = Cause(cause.kind, cause.certain, None, None, cause.hint, cause.fields)
        assert again.words() == cause.words(), kind
    assert UNKNOWN.words() == "no known cause in the crashed container's output"


def test_words_of_an_oom_say_the_figures() -> None:
    assert classify(traceback(OOM)).words() == (
        "CUDA out of memory loading the model (tried to allocate 2.00 GiB; 1.50 GiB free of 79.15 GiB)"
    )


def test_field_values_must_fit_their_types() -> None:
    assert valid_field("model", "meta-llama/Llama-3.1-8B")
    assert valid_field("free", "1.50 GiB")
    assert not valid_field("model", "meta-llama/Llama-3.1-8B?token=x")
    assert not valid_field("model", "hf_abcdefghijklmnopqrstuvwxyz")
    assert not valid_field("model", "a" * 500)
    assert not valid_field("address", "user:pass@host:4222")
    assert not valid_field("nope", "1")


def test_needles_are_the_literal_each_alternative_starts_with() -> None:
    assert needles(r"\bCUDA out of memory\. Tried") == ("CUDA out of memory. Tried",)
    assert needles(r"Model architectures? \[") == ("Model architecture",)
    assert needles(r"NCCL error in: |\bNCCL error: ") == ("NCCL error in: ", "NCCL error: ")
    assert needles(r"Failed to connect to (?P<d>etcd|NATS)") == ("Failed to connect to ",)
    with pytest.raises(ValueError, match="name needles"):
        needles(r"[Aa]ddress already in use")


def test_the_gate_finds_every_needle_and_passes_over_other_lines() -> None:
    patterns = [p for entry in CATALOG for p in entry.patterns]
    found_by_gate = gate(patterns)
    for pattern in patterns:
        for needle in pattern.needles:
            assert found_by_gate.search(f"x {needle} y"), needle
    assert found_by_gate.search("INFO 09-28 15:47:24 [loader.py:1] Loading weights took 12.3 seconds") is None


def test_every_field_a_pattern_names_has_a_type() -> None:
    for entry in CATALOG:
        for regex in (*(p.regex for p in entry.patterns), *entry.fields):
            assert set(regex.groupindex) <= set(FIELD_TYPES), (entry.kind, regex.pattern)


# The output contract


def test_a_cause_encodes_with_the_class_key() -> None:
    cause = classify(traceback(SAMPLES["import_error"]))
    assert json.loads(msgspec.json.encode(cause)) == {
        "class": "import_error",
        "certain": True,
        "line": "ModuleNotFoundError: No module named 'vllm._C'",
        "line_number": 4,
        "hint": BY_KIND["import_error"].hint,
        "fields": [["module", "vllm._C"]],
    }


def test_an_empty_output_is_unknown_and_result_may_be_asked_any_time() -> None:
    scanner = Scanner()
    assert scanner.result() == UNKNOWN
    scanner.feed(OOM + "\n")
    assert scanner.result().line == OOM  # without its line ending
    scanner.feed("more\r\n")
    assert scanner.result().line_number == 1


def test_the_engine_when_known_leaves_out_other_engines_messages() -> None:
    sglang = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
    assert classify([sglang], engine="sglang").kind == "kv_cache_insufficient"
    assert classify([sglang], engine="vllm") == UNKNOWN
    with pytest.raises(ValueError, match="unknown engine"):
        Scanner("llamacpp")


# Bounded


def test_a_long_line_is_cut_for_matching_and_in_the_line_reported() -> None:
    long = OOM + " x" * 10_000
    cause = classify([long])
    assert cause.line == long[:MAX_LINE]
    assert classify(["x" * MAX_LINE + OOM]) == UNKNOWN  # what lies past the cut is not read


def test_memory_stays_bounded_whatever_is_fed() -> None:
    """Many processes, each opening a traceback under a long log prefix, NCCL warnings, lines far past the cut,
    lines each of a shape of its own: what the scanner holds stays within its bound, however many lines come."""
    scanner = Scanner()
    bound = MAX_STREAMS * (MAX_LINE + 64) + 4 * 2 * MAX_LINE + MEMO_ENTRIES * (2 * MEMO_LINE + 6)
    held = []
    for n in range(3_000):
        prefix = f"(Worker_TP{n} pid={n}) ERROR 09-28 15:47:24 [{'x' * 3000}.py:1] "
        scanner.feed(prefix + "Traceback (most recent call last):")
        scanner.feed(prefix + '  File "/x.py", line 1, in f')
        scanner.feed(f"node:{n}:1 [0] NCCL WARN Connect to 10.0.0.{n % 250}<4000> failed, retrying " + "z" * 5000)
        scanner.feed(f"(Worker_TP{n}x pid=1) INFO 09-28 15:47:24 [{'y' * (n % 400)}.py:1] a line of its own shape")
        if n % 1_000 == 0:
            scanner.feed(OOM + " " + "y" * 1_000_000)
            held.append(scanner.held())
    assert max(held) <= bound
    assert scanner.held() <= bound
    assert len(scanner._streams) <= MAX_STREAMS
    assert 0 < len(scanner._shapes or {}) <= MEMO_ENTRIES
    assert scanner.result().kind == "gpu_oom"


def test_a_commands_start_compiles_no_catalog_until_an_output_is_read() -> None:
    """Every command imports `Cause` (a finding may carry one) and few read an output: the catalog's patterns
    (a tenth of a second) compile when the scanner is first asked for, not at import."""
    code = (
        "import sys, crashwatch.cli, pipeline.causes\n"
        "from pipeline.causes import UNKNOWN, Cause\n"
        "print(sorted(m for m in sys.modules if m.startswith('pipeline.causes.')))\n"
        "from pipeline.causes import classify\n"
        "print(classify(['torch.OutOfMemoryError: CUDA out of memory.']).kind)\n"
        "print(sorted(m for m in sys.modules if m.startswith('pipeline.causes.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    started, kind, read = done.stdout.splitlines()
    loaded = [f"pipeline.causes.{name}" for name in ("catalog", "cause", "scan", "unknown")]
    assert started == str([loaded[1], loaded[3]])
    assert kind == "gpu_oom"
    assert read == str(loaded)
