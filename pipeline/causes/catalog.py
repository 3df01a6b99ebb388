"""The known causes of an inference worker's crash, as data: one entry per cause.

Each entry says which engines print it, the messages that prove it (regular expressions written from the
engines' own error messages: vLLM, SGLang, TensorRT-LLM, Dynamo, Text Generation Inference, and the
libraries under them, PyTorch, NCCL, huggingface_hub, transformers, argparse, clap, click), the fields a
match extracts, whether the cause is certain at the first crash, a hint for the fix, and the words status
says. Precision comes before recall: a pattern names a message specific to its cause, never a word that
many failures share, because `unknown` is a good answer and a wrong class is not.

Fields reach status (Stalled's message), so every field has a type whose pattern cannot hold a secret
(`FIELD_TYPES`): a model id, a number with its unit, a flag name, a short path. A value that does not
fit its type, or looks like a token, is dropped, never cut down to fit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pipeline.causes.unknown import UNKNOWN_HINT, UNKNOWN_KIND

ENGINES = frozenset({"vllm", "sglang", "trtllm", "dynamo", "tgi"})

Certainty = Literal["always", "startup", "never"]
"""`always`: certain at the first crash (a gated model stays gated); `startup`: certain when the crash came
before the server said it serves (an OOM while loading recurs, one under load may not); `never`: may pass on
a retry (a dependency not up yet, a port a dying process still holds)."""

_SIZE = r"\d+(?:\.\d+)? ?(?:[KMGT]i?B|bytes)"
_NUMBER_OR_SIZE = r"\d+(?:\.\d+)?(?: ?(?:[KMGT]i?B|bytes))?"  # vLLM writes `(3.22/4.0 GiB)`: the unit once
_MODEL = r"/?[\w.-]+(?:/[\w.-]+){0,8}/?"

FIELD_TYPES: Mapping[str, re.Pattern[str]] = {
    name: re.compile(pattern)
    for name, pattern in {
        "model": _MODEL,
        "requested": _SIZE,
        "free": _NUMBER_OR_SIZE,
        "total": _SIZE,
        "needed": _SIZE,
        "available": _SIZE,
        "size": _NUMBER_OR_SIZE,
        "max_model_len": r"\d{1,12}",
        "kv_tokens": r"\d{1,12}",
        "estimated_max_len": r"\d{1,12}",
        "argument": r"-{0,2}[A-Za-z][\w.-]*",
        "architecture": r"[\w.-]+",
        "dtype": r"[\w.-]+",
        "quantization": r"[\w.-]+",
        "capability": r"\d{1,3}(?:\.\d{1,2})?",
        "driver_version": r"\d{1,6}(?:\.\d{1,4}){0,2}",
        "nccl_error": r"[a-z][a-z ]{2,60}",
        "timeout_ms": r"\d{1,12}",
        "dependency": r"etcd|NATS",
        "address": r"[\w.-]+:\d{1,5}",
        "port": r"\d{1,5}",
        "path": r"/[\w./-]*",
        "module": r"[\w.]+",
        "library": r"[\w.+-]+\.so[\w.]*",
    }.items()
}
MAX_FIELD = 120  # characters of one field's value
_SECRET = re.compile(r"hf_[A-Za-z0-9]{12,}|(?i:token|secret|passw|bearer|apikey|api_key)")


def valid_field(name: str, value: str) -> bool:
    """Whether a field's value fits its type: the guard between a log line and status."""
    kind = FIELD_TYPES.get(name)
    return (
        kind is not None
        and 0 < len(value) <= MAX_FIELD
        and kind.fullmatch(value) is not None
        and _SECRET.search(value) is None
    )


@dataclass(frozen=True)
class Pattern:
    """One message that proves a cause, and the engines that print it. `needles`: literal texts one of which
    every match holds, looked for first (a substring test is a hundred times cheaper than a search)."""

    regex: re.Pattern[str]
    needles: tuple[str, ...]
    engines: frozenset[str] = ENGINES
    weight: int | None = None  # the entry's, unless the message alone is weaker evidence (see Entry)

    def search(self, text: str) -> re.Match[str] | None:
        for needle in self.needles:
            if needle in text:
                return self.regex.search(text)
        return None


def needles(regex: str) -> tuple[str, ...]:
    """The literal text each top-level alternative of `regex` starts with: every match holds one of them."""
    found = tuple(_leading_literal(branch) for branch in _branches(regex))
    if any(len(needle) < 4 for needle in found):
        raise ValueError(f"no literal of 4 characters or more starts each alternative of {regex!r}: name needles")
    return found


# The printable ASCII characters from the rarest to the most common in the corpus's crash logs (any other
# is rarer still): where the gate's search may stop
_COMMON = ";!~%J&QKY#}{*j`+VZH<\\qz>D|BUMSWGA'PI=O\"Fxw9LN[T)](C7E5v,68bRkf4y3^2h_g.-mu1d:0/pclsiatnore "


def gate(patterns: Iterable[Pattern]) -> re.Pattern[str]:
    """One regular expression that finds any of the patterns' needles: the needles as a trie, so that a line
    holding none (nearly every line) is passed over in one search instead of one per needle. Each needle
    enters it from its rarest character on (at least 5 characters left): the search then stops only where
    such a character stands, not at every common letter."""
    trie: dict[str, dict[str, Any]] = {}
    for pattern in patterns:
        for whole in pattern.needles:
            start = min(range(max(len(whole) - 4, 1)), key=lambda at: _COMMON.find(whole[at]))
            needle = whole[start:]
            node = trie
            for char in needle:
                node = node.setdefault(char, {})
            node[""] = {}
    return re.compile(_alternatives(trie) or "(?!)")


def _alternatives(node: dict[str, dict[str, Any]]) -> str:
    if "" in node:
        return ""  # a needle ends here: any longer one holds it
    branches = [re.escape(char) + _alternatives(child) for char, child in sorted(node.items())]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


def _branches(regex: str) -> list[str]:
    branches, start, depth, position = [], 0, 0, 0
    in_class = False
    while position < len(regex):
        char = regex[position]
        if char == "\\":
            position += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            branches.append(regex[start:position])
            start = position + 1
        position += 1
    return [*branches, regex[start:]]


def _leading_literal(branch: str) -> str:
    literal: list[str] = []
    position = 0
    while branch.startswith(("\\b", "^"), position):
        position += 2 if branch.startswith("\\b", position) else 1
    while position < len(branch):
        char, step = branch[position], 1
        if char == "\\":
            char, step = branch[position + 1 : position + 2], 2
            if not char or char.isalnum():
                break
        elif char in ".^$*+?{}[]()|":
            break
        following = branch[position + step : position + step + 1]
        if following in ("?", "*", "{"):
            break
        literal.append(char)
        if following == "+":
            break
        position += step
    return "".join(literal)


Words = Callable[[Mapping[str, str], bool], str]


@dataclass(frozen=True)
class Entry:
    """One cause. `weight` orders causes that both show as errors: a lighter one is chosen only when no
    heavier one is found (an NCCL error is as often the echo of another rank's death as a cause).
    `sharpens`: the causes whose error this one explains when both show (a /dev/shm failure behind an
    NCCL error), even when this one shows only as a warning.

    A pattern may be weaker evidence than its entry (`Pattern.weight`): a bare HTTP 401 from huggingface.co
    means a gated model as often as the error that follows it in the chain says the repository does not
    exist; a heavier match of another class replaces it, one of the same class only confirms it.
    """

    kind: str
    patterns: tuple[Pattern, ...]
    fields: tuple[re.Pattern[str], ...]
    certain: Certainty
    hint: str
    words: Words
    weight: int = 2
    sharpens: tuple[str, ...] = ()
    tidy: Callable[[dict[str, str]], None] | None = None  # completes the fields once all are found

    @property
    def engines(self) -> frozenset[str]:
        return frozenset().union(*(p.engines for p in self.patterns))


def _p(regex: str, *engines: str, weight: int | None = None, find: tuple[str, ...] = ()) -> Pattern:
    return Pattern(re.compile(regex), find or needles(regex), frozenset(engines) if engines else ENGINES, weight)


def _f(*regexes: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(r) for r in regexes)


def _join(head: str, parts: list[str]) -> str:
    details = "; ".join(p for p in parts if p)
    return f"{head} ({details})" if details else head


def _same_unit(fields: dict[str, str]) -> None:
    """vLLM writes `(3.22/4.0 GiB)`: the free figure takes the total's unit."""
    free, total = fields.get("free"), fields.get("total")
    if free and total and free[-1].isdigit() and not total[-1].isdigit():
        fields["free"] = f"{free} {total.split()[-1]}"


def _gpu_oom(f: Mapping[str, str], certain: bool) -> str:
    free = f.get("free")
    total = f.get("total")
    memory = (
        f"{free} free of {total}" if free and total else f"{free} free" if free else f"{total} in all" if total else ""
    )
    requested = f"tried to allocate {f['requested']}" if "requested" in f else ""
    head = "CUDA out of memory loading the model" if certain else "CUDA out of memory"
    return _join(head, [requested, memory])


def _kv_cache(f: Mapping[str, str], certain: bool) -> str:
    parts = []
    if "max_model_len" in f:
        parts.append(f"max model length {f['max_model_len']}")
    if "needed" in f and "available" in f:
        parts.append(f"{f['needed']} of KV cache needed, {f['available']} available")
    if "kv_tokens" in f:
        parts.append(f"the KV cache holds {f['kv_tokens']} tokens")
    if "estimated_max_len" in f:
        parts.append(f"at most {f['estimated_max_len']} fits")
    return _join("the KV cache left after loading the model is too small for the maximum model length", parts)


def _access(f: Mapping[str, str], certain: bool) -> str:
    model = f"the model {f['model']}" if "model" in f else "the model"
    return f"{model} is gated or private: the Hugging Face token is missing or has no access"


def _not_found(f: Mapping[str, str], certain: bool) -> str:
    if "model" in f:
        return f"no model {f['model']}: the model id or path is wrong"
    return "no such model: the model id or path is wrong"


def _argument(f: Mapping[str, str], certain: bool) -> str:
    if "argument" in f:
        return f"the engine rejected its argument {f['argument']}"
    return "the engine rejected its command line"


def _unsupported(f: Mapping[str, str], certain: bool) -> str:
    if "architecture" in f:
        return f"the model architecture {f['architecture']} is not supported by this engine version"
    gpu = f"compute capability {f['capability']}" if "capability" in f else ""
    if "quantization" in f:
        return _join(f"the GPU cannot run the quantization {f['quantization']}", [gpu])
    if "dtype" in f:
        return _join(f"the GPU cannot run the dtype {f['dtype']}", [gpu])
    return _join("the model or its dtype cannot run on this GPU or engine version", [gpu])


def _gpu(f: Mapping[str, str], certain: bool) -> str:
    driver = f"driver version {f['driver_version']}" if "driver_version" in f else ""
    return _join("no usable GPU: none visible to the container, or its driver is too old", [driver])


def _shm(f: Mapping[str, str], certain: bool) -> str:
    size = f.get("size", "")
    size = f"a segment of {size}{' bytes' if size[-1:].isdigit() else ''} could not be created" if size else ""
    return _join("/dev/shm is too small for NCCL or the engine's shared memory", [size])


def _nccl(f: Mapping[str, str], certain: bool) -> str:
    if "timeout_ms" in f:
        return f"an NCCL collective timed out after {f['timeout_ms']} ms"
    return _join("NCCL communication between the GPUs failed", [f.get("nccl_error", "")])


def _dependency(f: Mapping[str, str], certain: bool) -> str:
    what = f.get("dependency", "a service the worker needs (etcd or NATS)")
    return _join(f"{what} is not reachable", [f.get("address", "")])


def _port(f: Mapping[str, str], certain: bool) -> str:
    return f"port {f['port']} is already in use" if "port" in f else "a port the worker listens on is already in use"


def _disk(f: Mapping[str, str], certain: bool) -> str:
    return _join("no space left on the disk", [f"writing {f['path']}" if "path" in f else ""])


def _import(f: Mapping[str, str], certain: bool) -> str:
    if "module" in f:
        return f"the image is broken: the Python module {f['module']} cannot be imported"
    if "library" in f:
        return f"the image is broken: the library {f['library']} is missing or does not match"
    return "the image is broken: a module or library cannot be imported"


def _permission(f: Mapping[str, str], certain: bool) -> str:
    return _join("permission denied", [f"on {f['path']}" if "path" in f else ""])


_HF_MODEL = r"huggingface\.co/(?:api/models/)?(?P<model>[\w.-]+(?:/(?!resolve/|revision/|tree/|blob/)[\w.-]+)?)"

# In the order a line is tried: the first entry with a matching pattern takes the line, so an entry
# whose messages are a special case of another's comes first (/dev/shm before a full disk, libcuda
# before a missing library, the KV cache before a plain OOM).
CATALOG: tuple[Entry, ...] = (
    Entry(
        "shm_exhausted",
        (
            _p(r"Error while creating shared memory segment /dev/shm/"),
            _p(r"/dev/shm\S*.{0,120}?No space left on device|No space left on device.{0,120}?/dev/shm"),
            _p(r"unable to (?:write to|open) (?:file|shared memory object) </torch_", find=("</torch_",)),
            _p(r"insufficient shared memory \(shm\)"),
        ),
        _f(r"\(size (?P<size>\d+)\)"),
        "never",
        "/dev/shm is too small: mount an emptyDir with medium: Memory at /dev/shm (Dynamo: the component's "
        "sharedMemory size), large enough for NCCL and the engine (a few GiB).",
        _shm,
        sharpens=("nccl_failure",),
    ),
    Entry(
        "kv_cache_insufficient",
        (
            _p(r"KV cache is needed, which is larger than the available KV cache memory", "vllm", "dynamo"),
            _p(
                r"max seq len \(\d+\) is larger than the maximum number of tokens that can be stored in KV cache",
                "vllm",
                "dynamo",
            ),
            _p(r"To serve at least one request with the model(?:'s|s's)? max seq len \(\d+\)", "vllm", "dynamo"),
            _p(r"No available memory for the cache blocks", "vllm", "dynamo"),
            _p(r"Not enough memory\. Please try to increase --mem-fraction-static", "sglang", "dynamo"),
            _p(
                r"maxTokensInPagedKvCache.{0,40}must be large enough to process at least 1 sequence", "trtllm", "dynamo"
            ),
        ),
        _f(
            r"max seq len \((?P<max_model_len>\d+)\)",
            r"(?P<needed>" + _SIZE + r") KV cache is needed",
            r"available KV cache memory \((?P<available>" + _SIZE + r")\)",
            r"estimated maximum model length is (?P<estimated_max_len>\d+)",
            r"stored in KV cache \((?P<kv_tokens>\d+)\)",
        ),
        "startup",
        "The KV cache left after loading the weights cannot hold one sequence of the maximum length: lower the "
        "maximum length (vLLM --max-model-len, SGLang --context-length, TensorRT-LLM max_seq_len), give the cache "
        "more memory (--gpu-memory-utilization, --mem-fraction-static), or spread the model over more GPUs.",
        _kv_cache,
    ),
    Entry(
        "gpu_oom",
        (
            _p(r"CUDA out of memory"),
            _p(r"torch\.(?:cuda\.)?OutOfMemoryError", find=("OutOfMemoryError",)),
            _p(
                r"CUDA (?:runtime |driver )?error\b.{0,160}?\bout of memory",
                find=("CUDA error", "CUDA runtime error", "CUDA driver error"),
            ),
            _p(r"CUBLAS_STATUS_ALLOC_FAILED"),
            _p(
                r"Free memory on device(?: \S+)? \([\d.]+/[\d.]+ GiB\) on startup is less than desired GPU memory "
                r"utilization",
                "vllm",
                "dynamo",
            ),
            _p(r"Executor creation failed due to insufficient GPU memory", "trtllm", "dynamo"),
            _p(r"Error Code \d+: (?:Cuda Runtime \(out of memory\)|OutOfMemory\b)", "trtllm", "dynamo"),  # TensorRT
            _p(r"Not enough memory to handle \d+ prefill tokens", "tgi"),
        ),
        _f(
            r"Tried to allocate (?P<requested>" + _SIZE + r")",
            r"total capac\w* of (?P<total>" + _SIZE + r") of which (?P<free>" + _SIZE + r") (?:is )?free",
            r"(?P<total>" + _SIZE + r") total capac\w*;.{0,120}?(?P<free>" + _SIZE + r") free",
            r"Free memory on device(?: \S+)? \((?P<free>[\d.]+)/(?P<total>[\d.]+ GiB)\)",
        ),
        "startup",
        "The model does not fit in GPU memory with these settings: spread it over more GPUs (tensor parallelism), "
        "use a smaller or quantized model, lower the engine's memory settings (vLLM --gpu-memory-utilization or "
        "--max-num-seqs, SGLang --mem-fraction-static), and check that no other process holds the GPU.",
        _gpu_oom,
        tidy=_same_unit,
    ),
    Entry(
        "model_access_denied",
        (
            _p(r"\bGatedRepoError\b"),
            _p(r"Cannot access gated repo for url"),
            _p(r"Access to model \S+ is restricted"),
            _p(r"You are trying to access a gated repo"),
            _p(r"is awaiting a review from the repo authors"),
            _p(r"403 Forbidden: .{0,200}Cannot access content at: https://huggingface\.co/"),
            _p(
                r"Invalid (?:user token|credentials in Authorization header)",
                find=("Invalid user token", "Invalid credentials in Authorization header"),
            ),
            _p(r"\b403 Client Error: Forbidden for url: https://huggingface\.co/"),
            _p(r"https://huggingface\.co/\S+: status code 403", "dynamo", "tgi"),
            _p(r"\(403 Forbidden\) for url \(https://huggingface\.co/", "dynamo", "tgi"),  # reqwest
            # huggingface.co answers 401 for a gated model without a token, and for a repository that does
            # not exist (or a private one) alike: weak, until the rest of the chain says which
            _p(r"\b401 Client Error: Unauthorized for url: https://huggingface\.co/", weight=1),
            _p(r"\(401 Unauthorized\) for url \(https://huggingface\.co/", "dynamo", "tgi", weight=1),
        ),
        _f(
            r"Access to model (?P<model>" + _MODEL + r") is restricted",
            r"from model '(?P<model>" + _MODEL + r")'",
            _HF_MODEL,
        ),
        "always",
        "The model is gated or private: accept its licence on huggingface.co with the account whose token the "
        "worker uses, and give the worker that token (HF_TOKEN, from a Secret).",
        _access,
    ),
    Entry(
        "model_not_found",
        (
            _p(r"\bRepositoryNotFoundError\b"),
            _p(r"Repository Not Found for url"),
            _p(r"is not a local folder and is not a valid model identifier"),
            _p(r"Invalid repository ID or local directory specified"),
            _p(r"Repo id must (?:be in the form|use alphanumeric chars)"),
            _p(r"\bRevisionNotFoundError\b|Revision Not Found for url"),
            _p(r"https://huggingface\.co/\S+: status code 404", "dynamo", "tgi"),
            _p(r"\(404 Not Found\) for url \(https://huggingface\.co/", "dynamo", "tgi"),
        ),
        _f(
            r"(?:Invalid repository ID or local directory specified|namespace/repo_name'): '(?P<model>"
            + _MODEL
            + r")'",
            r"(?:^|[\s'\"])(?P<model>" + _MODEL + r")'? is not a local folder",
            r"Repo id must use alphanumeric chars.{0,200}?: '(?P<model>" + _MODEL + r")'",
            r"from model '(?P<model>" + _MODEL + r")'",
            _HF_MODEL,
        ),
        "always",
        "No model by that id or path: check the model name (owner/name on huggingface.co) and its revision, or "
        "that a local path is mounted into the container; a private repository also answers 'not found' without "
        "a token.",
        _not_found,
    ),
    Entry(
        "bad_argument",
        (
            # argparse (vLLM, SGLang, Dynamo's Python components)
            _p(
                r": error: (?:unrecognized arguments|the following arguments are required|ambiguous option)",
                find=(": error: unrecognized arguments", ": error: the following arguments", ": error: ambiguous"),
            ),
            _p(r": error: argument -{1,2}[\w-]+.{0,80}?: (?:invalid|expected|ignored explicit|not allowed)"),
            # clap (Text Generation Inference's launcher, Dynamo's Rust binaries)
            _p(
                r"\berror: (?:unexpected argument '|invalid value '|Found argument '|the following required arguments)",
                find=(
                    "error: unexpected argument '",
                    "error: invalid value '",
                    "error: Found argument '",
                    "error: the following required arguments",
                ),
            ),
            _p(r"^Error: ArgumentValidation\(", "tgi"),
            # click (trtllm-serve)
            _p(
                r"^Error: (?:No such option|Invalid value for '|Got unexpected extra argument"
                r"|Missing (?:argument|option) ')",
                "trtllm",
                "dynamo",
                find=("Error: No such option", "Error: Invalid value for '", "Error: Got unexpected", "Error: Missing"),
            ),
            # vLLM's own checks of its arguments
            _p(r"User-specified max_model_len \(\d+\) is greater than the derived max_model_len", "vllm", "dynamo"),
            _p(r"Total number of attention heads \(\d+\) must be divisible by tensor parallel size", "vllm", "dynamo"),
            _p(r"max_num_batched_tokens \(\d+\) is smaller than max_model_len", "vllm", "dynamo"),
        ),
        _f(
            r"unrecognized arguments: (?P<argument>-{0,2}[A-Za-z][\w.-]*)",
            r"required: (?P<argument>-{0,2}[A-Za-z][\w.-]*)",
            r"ambiguous option: (?P<argument>-{0,2}[A-Za-z][\w.-]*)",
            r"error: argument (?P<argument>-{1,2}[A-Za-z][\w.-]*)",
            r"unexpected argument '(?P<argument>-{0,2}[A-Za-z][\w.-]*)",
            r"invalid value '[^']*' for '(?P<argument>-{1,2}[A-Za-z][\w.-]*)",
            r"Found argument '(?P<argument>-{0,2}[A-Za-z][\w.-]*)'",
            r"No such option: (?P<argument>-{1,2}[A-Za-z][\w.-]*)",
            r"Invalid value for '(?P<argument>-{1,2}[A-Za-z][\w.-]*)",
            r"Missing (?:argument|option) '(?P<argument>-{0,2}[A-Za-z][\w.-]*)'",
            r"User-specified (?P<argument>max_model_len)",
        ),
        "always",
        "The engine rejected its command line: check each flag's name and value against the engine version in the "
        "image (flags are renamed and removed between versions).",
        _argument,
    ),
    Entry(
        "unsupported_model",
        (
            _p(r"Model architectures? \[.{0,200}?\] (?:are|is) not supported for now"),
            _p(r"but Transformers does not recognize this architecture"),
            _p(r"Bfloat16 is only supported on GPUs with compute capability of at least"),
            _p(r"The quantization method \w+ is not supported for the current GPU"),
            _p(r"no kernel image is available for execution on the device"),
            _p(r"FlashAttention only supports Ampere GPUs or newer"),
        ),
        _f(
            r"Model architectures? \[\s*'(?P<architecture>[\w.-]+)'",
            r"has model type `(?P<architecture>[\w.-]+)`",
            r"(?P<dtype>Bfloat16) is only supported",
            r"has compute capability (?P<capability>\d{1,3}(?:\.\d{1,2})?)",
            r"quantization method (?P<quantization>[\w.-]+) is not supported",
            r"Current capability: (?P<capability>\d{1,3})",
        ),
        "always",
        "This engine version or this GPU cannot run the model as configured: use an engine image that supports the "
        "architecture, a dtype or quantization the GPU supports (--dtype half before Ampere), or another GPU type.",
        _unsupported,
    ),
    Entry(
        "gpu_unavailable",
        (
            _p(r"No CUDA GPUs are available"),
            _p(r"Found no NVIDIA driver on your system"),
            _p(r"The NVIDIA driver on your system is too old"),
            _p(r"CUDA driver version is insufficient for CUDA runtime version|cudaErrorInsufficientDriver"),
            _p(r"no CUDA-capable device is detected|cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE"),
            _p(r"Unexpected error from cudaGetDeviceCount\(\)"),
            _p(r"forward compatibility was attempted on non supported HW"),
            _p(r"system has unsupported display driver / cuda driver combination"),
            _p(
                r"Failed to initialize NVML|NVML Shared Library Not Found|NVMLError_(?:DriverNotLoaded|LibraryNotFound)"
            ),
            _p(
                r"lib(?:cuda|nvidia-ml)\.so(?:\.\d+)*: cannot open shared object file",
                find=("libcuda.so", "libnvidia-ml.so"),
            ),
            _p(r"Failed to infer device type|Device string must not be empty", "vllm", "dynamo"),
            _p(r"\bCUDA is not available\b(?![,;:] *(?:using|falling|fall back|running|switching))"),
        ),
        _f(r"too old \(found version (?P<driver_version>\d{1,6}(?:\.\d{1,4}){0,2})\)"),
        "always",
        "No usable GPU in the container: request nvidia.com/gpu in the Pod's resources, check the NVIDIA device "
        "plugin and container runtime on the node, and that the node's driver is recent enough for the image's CUDA.",
        _gpu,
    ),
    Entry(
        "nccl_failure",
        (
            _p(r"NCCL error in: |\bNCCL error: "),
            _p(
                r"\bnccl(?:SystemError|InternalError|UnhandledCudaError|InvalidUsage|RemoteError|InvalidArgument)\b",
                find=(
                    "ncclSystemError",
                    "ncclInternalError",
                    "ncclUnhandledCudaError",
                    "ncclInvalidUsage",
                    "ncclRemoteError",
                    "ncclInvalidArgument",
                ),
            ),
            _p(r"Watchdog caught collective operation timeout"),
            _p(r"NCCL communicator was aborted"),
        ),
        _f(
            r"NCCL error(?: in: \S+)?,? (?:: )?(?P<nccl_error>unhandled system error|unhandled cuda error|internal "
            r"error|invalid usage|invalid argument|remote process exited or there was a network error)",
            r"ran for (?P<timeout_ms>\d+) milliseconds before timing out",
        ),
        "never",
        "Communication between the GPUs failed (NCCL). It is often the echo of another rank's crash: look for that "
        "first; otherwise check /dev/shm, the network between nodes (NCCL_SOCKET_IFNAME, InfiniBand) and run once "
        "with NCCL_DEBUG=INFO.",
        _nccl,
        weight=1,
    ),
    Entry(
        "dependency_unreachable",
        (
            _p(r"Failed to connect to (?P<dependency>etcd|NATS)\b", "dynamo"),
            _p(r"nats: no servers available for connection", "dynamo"),
        ),
        _f(r"(?:https?|nats|tcp)://(?P<address>[\w.-]+:\d{1,5})\b(?![\w@])"),
        "never",
        "A service the worker needs did not answer: check that etcd and NATS (with JetStream) run and that their "
        "addresses in the worker's environment (ETCD_ENDPOINTS, NATS_SERVER) are right; this may pass on a retry.",
        _dependency,
    ),
    Entry(
        "port_in_use",
        (_p(r"[Aa]ddress already in use|\bEADDRINUSE\b", find=("ddress already in use", "EADDRINUSE")),),
        _f(
            r"bind on address \('[^']*', (?P<port>\d{1,5})\)",
            r"\bport:? (?P<port>\d{1,5})\b",
            r"failed to bind to \S*:(?P<port>\d{1,5})\b",
            r":(?P<port>\d{1,5})\b\)?[^\d:]{0,40}[Aa]ddress already in use",
        ),
        "never",
        "Another process already listens on that port in the Pod (often the previous run, still exiting, or two "
        "components given the same port): give each its own port; this may pass on a retry.",
        _port,
    ),
    Entry(
        "disk_full",
        (
            _p(r"No space left on device|\[Errno 28\]|\bos error 28\b|\bENOSPC\b"),
            _p(r"Not enough free disk space to download the file"),
        ),
        _f(
            r"No space left on device: '(?P<path>/[\w./-]*)'",
            r"The target location (?P<path>/[\w./-]*) only has",
        ),
        "never",
        "A disk the worker writes to is full, often the Hugging Face cache while downloading the weights: give the "
        "cache volume more space, or load the model into a volume beforehand.",
        _disk,
    ),
    Entry(
        "import_error",
        (
            _p(r"^(?:\w+\.)*(?:ImportError|ModuleNotFoundError)\b", find=("ImportError", "ModuleNotFoundError")),
            _p(r"\bNo module named '"),
            _p(r"\bcannot import name '\w+' from '"),
            _p(r": undefined symbol: "),
            _p(r"lib[\w.+-]*\.so[\w.]*: cannot open shared object file", find=(": cannot open shared object file",)),
        ),
        _f(
            r"No module named '(?P<module>[\w.]+)'",
            r"cannot import name '\w+' from '(?P<module>[\w.]+)'",
            r"(?:^|[\s/])(?P<library>[\w.+-]+\.so[\w.]*): (?:cannot open shared object file|undefined symbol)",
        ),
        "always",
        "The image is broken or mismatched: a Python module or a shared library is missing or of the wrong version; "
        "use a released image of the engine, or rebuild it with matching versions.",
        _import,
    ),
    Entry(
        "permission_denied",
        (
            _p(r"\[Errno 13\] Permission denied|Permission denied \(os error 13\)|\bPermissionError\b"),
            _p(r"\[Errno 30\] Read-only file system|Read-only file system \(os error 30\)"),
            _p(r"There was a problem when trying to write in your cache folder"),  # transformers
            _p(
                r": [Pp]ermission denied\s*$", find=("ermission denied",)
            ),  # a shell or exec(3): `/x/python3: Permission denied`
        ),
        _f(
            r"(?:Permission denied|Read-only file system): '(?P<path>/[\w./-]*)'",
            r"write in your cache folder \((?P<path>/[\w./-]*)\)",
            r"(?P<path>/[\w./-]*): [Pp]ermission denied\s*$",
        ),
        "never",
        "The process may not write or read a path, often the model cache or a mounted volume: check the volume's "
        "ownership and mode against the Pod's securityContext (runAsUser, fsGroup), or point the cache "
        "(HF_HOME) at a writable volume.",
        _permission,
    ),
)


# Warnings that name a failure all the same, read as lines that say no level: NCCL prints its errors as WARN
# (a shared memory segment it cannot create stops it, unlike a connection it retries); TGI's "Could not import
# Flash Attention enabled models: X" is followed by "Sharded ... requires Flash Attention enabled models" once
# it starts a shard; huggingface_hub's "Not enough free disk space" comes before a download that cannot fit.
FATAL_WARNINGS: tuple[Pattern, ...] = (
    _p(r"NCCL WARN (?:Error while creating shared memory segment|Call to posix_fallocate failed)"),
    _p(r"Could not import Flash Attention enabled models: ", "tgi"),
    # huggingface_hub warns before a download that cannot fit, which then fails or never ends
    _p(r"Not enough free disk space to download the file"),
)

# NCCL prints an error as a WARN, then the calls it unwinds as `NCCL INFO file.cc:570 -> 2` (a non-zero
# result); a WARN it recovers from (a connection it retries) has no such trail. So a WARN followed by its
# trail is read as a line that says no level: its class if an entry matches it, nccl_failure if none does.
NCCL_WARN = "NCCL WARN"
NCCL_TRAIL = re.compile(r"NCCL INFO \S+:\d+ -> [1-9]")

# What an engine prints once it serves: an error after it did not stop the start-up, and an error before it did
# not stop the server (the server came up after it).
SERVING: tuple[Pattern, ...] = (
    _p(r"Application startup complete|Uvicorn running on", "vllm", "sglang", "trtllm", "dynamo"),
    _p(r"The server is fired up and ready to roll", "sglang", "dynamo"),
    _p(r"text_generation_router\S*: .{0,80}\bConnected\s*$", "tgi"),
)

BY_KIND: Mapping[str, Entry] = {entry.kind: entry for entry in CATALOG}
KINDS: tuple[str, ...] = (*(entry.kind for entry in CATALOG), UNKNOWN_KIND)


def words(kind: str, fields: Mapping[str, str], certain: bool) -> str:
    """Status's sentence for a cause, from its class and fields alone (never a log line)."""
    entry = BY_KIND.get(kind)
    if entry is None:
        return "no known cause in the crashed container's output"
    return entry.words(fields, certain)


def hint(kind: str) -> str:
    entry = BY_KIND.get(kind)
    return UNKNOWN_HINT if entry is None else entry.hint
