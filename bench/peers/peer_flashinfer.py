"""FlashInfer paged decode / prefill, imported or installed from the carried wheels; see run_peers.py."""
import argparse
import glob
import importlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import traceback
import zipfile

import torch

from peers_common import (bytes_terms, finish_row, layer_sets, log, new_row, over_budget, parse_ints, reference,
                          rel_err, short, skip_rows, timed_row, tree_mask)


# --- FlashInfer (imported, or installed from the carried wheels) ------------------------------------------------
# The GPU machine has no network and no flashinfer. bench/peers/fetch_flashinfer.sh puts flashinfer-python and
# the dependency wheels it lacks into <repo>/.wheels; they are installed from there into --flashinfer-target.
# FlashInfer compiles its kernels with nvcc at first use: that happens in child processes (one per module kind,
# in parallel), bounded by --flashinfer-compile-seconds, so that a slow or failing compile gives `not run` rows
# with the reason instead of eating the run. The JIT cache lives under /tmp and is reused by the timed calls.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FI_MARK = "FLASHINFER_WARMUP "


FI_TC = "flashinfer-tcdecode"
FI_FP8 = "flashinfer-fp8"
FI_FP8_SCALES = {"k_scale": 1.0, "v_scale": 1.0}  # run()'s dequantisation scales of the e4m3 cache (1: no-op)


def fi_calls(a, scenario, Ts):
    """(T, tree) of a scenario's FlashInfer rows: a chain of every T, and in the seed scenario (one sequence, which
    the tree kind needs: see fi_plan) a draft tree of each --flashinfer-trees node count."""
    return [(T, False) for T in Ts] + [(T, True) for T in (a.flashinfer_trees if scenario == "seed" else [])]


def fi_jobs(a, T, tree=False):
    """(system, kind) of the FlashInfer rows for T new tokens. Kinds: decode (T=1: tensor-core decode), prefill
    (T>1: BatchPrefillWithPagedKVCacheWrapper, causal), tcdecode (T>1: tensor-core decode with q_len_per_req=T,
    causal within the request; FlashInfer >= 0.6.18 has it); decode-fp8 and tcdecode-fp8: the same two over an
    e4m3 KV cache (system flashinfer-fp8). With tree, the one kind tree: a draft tree of T nodes, the prefill
    wrapper with a custom mask (system flashinfer; its rows have "tree": true)."""
    if tree:
        return [("flashinfer", "tree")] if "flashinfer" in a.systems else []
    jobs = []
    if "flashinfer" in a.systems:
        if T == 1:
            jobs.append(("flashinfer", "decode"))
        else:
            if a.flashinfer_multitoken in ("prefill", "both"):
                jobs.append(("flashinfer", "prefill"))
            if a.flashinfer_multitoken in ("decode", "both"):
                jobs.append((FI_TC, "tcdecode"))
    if FI_FP8 in a.systems:
        jobs.append((FI_FP8, "decode-fp8" if T == 1 else "tcdecode-fp8"))
    return jobs


def fi_kind_kv(kind):
    """(kind without its KV suffix, KV cache dtype, bytes a KV element): 'tcdecode-fp8' is tcdecode over e4m3."""
    if kind.endswith("-fp8"):
        return kind[: -len("-fp8")], torch.float8_e4m3fn, 1
    return kind, torch.float16, 2


def fi_decode_backend(a, kv_dtype):
    """The decode wrapper's backend: --flashinfer-backend, with `auto` for an fp8 cache written out as fa2. That is
    what FlashInfer's auto resolves to for f16 queries over an fp8 cache (is_fa3_backend_supported: its FA3 fp8
    path needs fp8 queries), and its resolution asks the device, which the dry run on the CPU has not."""
    if kv_dtype != torch.float16 and a.flashinfer_backend == "auto":
        return "fa2"
    return a.flashinfer_backend


def fi_module_key(a, kind):
    """Which JIT module a kind loads, as far as known before planning: the decode wrapper with tensor cores
    resolves `auto` to fa2 for f16 and for f16 queries over an fp8 cache; the prefill wrapper's `auto` is FA3 on
    Hopper; the tree kind is fa2 whatever the options. Kinds with the same key share one module and so one
    warm-up child."""
    base, kv, _ = fi_kind_kv(kind)
    if base in ("decode", "tcdecode"):
        key = "fa2" if a.flashinfer_backend in ("auto", "fa2") else a.flashinfer_backend
        return key if kv == torch.float16 else key + "-fp8"
    if base == "tree":
        return "fa2"
    return "prefill-" + a.flashinfer_prefill_backend if a.flashinfer_prefill_backend == "auto" else \
        a.flashinfer_prefill_backend


def fi_env(a, arch=None):
    """FlashInfer's environment: JIT cache and cubin dir under /tmp, one target arch, no downloads. Values
    already set by the caller win. Must run before `import flashinfer` (it reads them at import)."""
    base = a.flashinfer_target + "-jit"
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", base)  # cache: $base/.cache/flashinfer/<ver>/<arch>
    os.environ.setdefault("FLASHINFER_CUBIN_DIR", os.path.join(base, "cubins"))
    os.environ.setdefault("FLASHINFER_NO_DOWNLOAD", "1")  # no network there: fail at once, not after a timeout
    if arch:
        os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", arch)
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", arch)
    return os.environ["FLASHINFER_WORKSPACE_BASE"]


def fi_use_target(a):
    """Puts --flashinfer-target first on sys.path, and its ninja on PATH if there is none."""
    if a.flashinfer_target not in sys.path:
        sys.path.insert(0, a.flashinfer_target)
    importlib.invalidate_caches()
    if not shutil.which("ninja"):  # FlashInfer runs `ninja`; the ninja wheel carries one
        for nb in fi_ninja_dirs(a.flashinfer_target):
            os.environ["PATH"] = nb + os.pathsep + os.environ.get("PATH", "")
            break


def fi_ninja_dirs(target):
    """Directories under target holding the ninja wheel's binary: bin/ (pip --target), or where unzip put it."""
    dirs = [os.path.join(target, "bin")] + glob.glob(os.path.join(target, "ninja-*.data", "scripts"))
    return [d for d in dirs if os.path.isfile(os.path.join(d, "ninja"))]


def fi_arch():
    """nvcc target for this device: 9.0a on Hopper (FlashInfer's FA3 kernels need the `a` features)."""
    major, minor = torch.cuda.get_device_capability(0)
    return f"{major}.{minor}a" if major >= 9 else f"{major}.{minor}"


def fi_aot_name(version, arch):
    return f"flashinfer-aot-{version}-sm{arch.replace('.', '')}.tar.gz"


def fi_install(a):
    """Installs the wheels of --flashinfer-wheels into --flashinfer-target (pip, else unzip), and unpacks a
    prebuilt module archive of the same FlashInfer version (fetch_flashinfer.sh with PREBUILD=1) into its
    data/aot, where FlashInfer looks before compiling. Returns (description, None) or (None, why not)."""
    wheels = sorted(glob.glob(os.path.join(a.flashinfer_wheels, "*.whl")))
    fiw = [w for w in wheels if os.path.basename(w).startswith("flashinfer_python-")]
    if not fiw:
        return None, (f"no flashinfer_python wheel in {a.flashinfer_wheels} (bench/peers/fetch_flashinfer.sh "
                      "fetches it)")
    version = os.path.basename(fiw[-1]).split("-")[1]
    aots = sorted(glob.glob(os.path.join(a.flashinfer_wheels, fi_aot_name(version, "*"))))
    names = "\n".join(f"{os.path.basename(w)} {os.path.getsize(w)}" for w in wheels + aots)  # a new archive: redo
    stamp = os.path.join(a.flashinfer_target, ".pagedattn-wheels")
    try:
        with open(stamp) as f:
            if f.read() == names:
                return (f"already installed in {a.flashinfer_target} from the same files ({len(wheels)} wheels, "
                        f"{len(aots)} prebuilt module archive{'' if len(aots) == 1 else 's'})"), None
    except OSError:
        pass
    t0 = time.monotonic()
    shutil.rmtree(a.flashinfer_target, ignore_errors=True)
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--disable-pip-version-check",
           "--no-compile", "--find-links", a.flashinfer_wheels, "--target", a.flashinfer_target] + wheels
    how = "pip install --no-index --no-deps --target"
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        pip_err = None if p.returncode == 0 else f"pip exited with {p.returncode}: " + \
            " ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
    except Exception as e:  # noqa: BLE001 - no pip, or it hung: unzip below
        pip_err = "pip: " + short(e, 200)
    if pip_err:
        log(f"flashinfer: {pip_err[:300]}; unpacking the wheels instead")
        shutil.rmtree(a.flashinfer_target, ignore_errors=True)
        how = f"unzip ({pip_err[:120]})"
        try:
            for w in wheels:
                with zipfile.ZipFile(w) as z:
                    z.extractall(a.flashinfer_target)
            for nb in fi_ninja_dirs(a.flashinfer_target):
                os.chmod(os.path.join(nb, "ninja"), 0o755)  # zipfile drops the mode bits
        except Exception as e:  # noqa: BLE001
            return None, f"installing the wheels failed: {pip_err}; unzip: {short(e, 150)}"
    how = f"{how} {a.flashinfer_target}: {len(wheels)} wheels"
    for t in aots:
        try:
            with tarfile.open(t) as tf:
                dest = os.path.join(a.flashinfer_target, "flashinfer", "data", "aot")
                tf.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            how += f", prebuilt modules of {os.path.basename(t)}"
        except Exception as e:  # noqa: BLE001 - FlashInfer compiles them then
            how += f", could not unpack {os.path.basename(t)}: {short(e, 120)}"
    with open(stamp, "w") as f:
        f.write(names)
    return f"{how} in {time.monotonic() - t0:.1f} s", None


def fi_requested_modules(fi, a, kinds):
    """Dry run, no GPU needed: makes and plans each kind's wrapper through fi_plan (the same call the timed rows
    make; tiny problem, CPU tensors) up to where FlashInfer asks for its JIT module, and records that request.
    kinds: [(kind, prefill backend)]. Returns [(kind, backend, args)], args as passed to
    flashinfer.prefill.get_batch_prefill_module(backend, *args) (dtypes, head dims, pos-encoding, sliding window,
    logits cap, fp16 qk reduction), which builds gen_batch_prefill_module(backend, *args)."""
    import flashinfer.decode as fd
    import flashinfer.prefill as fp

    class Asked(Exception):
        pass

    asked = []

    def ask(backend, *args):
        asked.append((backend, args))
        raise Asked()

    saved = (fp.get_batch_prefill_module, fd.get_batch_prefill_module, torch.empty)

    def empty(*x, **k):  # the wrappers pin a host buffer, which needs a driver
        k.pop("pin_memory", None)
        return saved[2](*x, **k)

    out = []
    try:
        fp.get_batch_prefill_module = fd.get_batch_prefill_module = ask
        torch.empty = empty
        for kind, pb in kinds:
            b = argparse.Namespace(**dict(vars(a), flashinfer_prefill_backend=pb or a.flashinfer_prefill_backend))
            T = 1 if fi_kind_kv(kind)[0] == "decode" else 2
            S = 2 * b.block_size + T
            n = -(-S // b.block_size)
            table = torch.arange(n, dtype=torch.int32).view(1, n)
            before = len(asked)
            try:
                fi_plan(fi, b, torch.device("cpu"), 1, S, T, table, kind, ws_bytes=1 << 20)
            except Asked:
                pass
            if len(asked) == before:
                raise RuntimeError(f"the {kind} wrapper did not ask for a batch prefill module")
            out.append((kind,) + asked[-1])
    finally:
        fp.get_batch_prefill_module, fd.get_batch_prefill_module, torch.empty = saved
    return out


def fi_install_import(a, tag):
    """fi_install, then import flashinfer from --flashinfer-target (the no-GPU tools). Returns the module or None."""
    how, why = fi_install(a)
    log(f"{tag}: {why or how}")
    if why:
        return None
    fi_use_target(a)
    return importlib.import_module("flashinfer")


def fi_prebuild_kinds(a):
    """The kinds (and prefill backends) whose modules --flashinfer-prebuild packs: f16 decode and tcdecode, paged
    prefill with each of --flashinfer-prebuild-backends, the tree kind (fa2), and decode and tcdecode over an e4m3
    cache."""
    pbs = [x.strip() for x in a.flashinfer_prebuild_backends.split(",") if x.strip()]
    return [("decode", None), ("tcdecode", None)] + [("prefill", pb) for pb in pbs] + [("tree", None)] + \
        [("decode-fp8", None), ("tcdecode-fp8", None)]


def fi_prebuild(a):
    """--flashinfer-prebuild (fetch_flashinfer.sh with PREBUILD=1; no GPU needed, nvcc of the GPU machine's CUDA
    major version): compiles the modules that the timed calls load, for --flashinfer-arch, and packs them into
    <wheels>/flashinfer-aot-<version>-sm<arch>.tar.gz. Which modules: the ones the wrappers ask for, found by a
    dry run of fi_plan (fi_requested_modules) for tensor-core decode (T=1 and q_len_per_req>1) and paged prefill
    with each of --flashinfer-prebuild-backends (fa2: the default; fa3: what backend auto picks on Hopper), the
    tree kind, and tensor-core decode over an e4m3 cache. Per head size that is up to three modules: the f16 FA2
    one (decode, tcdecode, fa2 prefill and tree share it: the module's arguments carry no mask mode, and it holds
    the paged and ragged kernels of every mask mode, custom included), the FA3 one, and the FA2 one with dtype_kv
    e4m3 (decode-fp8 and tcdecode-fp8). On the GPU machine fi_install unpacks the archive into flashinfer/data/aot:
    FlashInfer loads a module from there without compiling, and compiles it as usual if it does not load."""
    os.environ["FLASHINFER_CUDA_ARCH_LIST"] = os.environ["TORCH_CUDA_ARCH_LIST"] = a.flashinfer_arch
    base = fi_env(a)
    fi = fi_install_import(a, "prebuild")
    if fi is None:
        return 1
    from flashinfer.jit.attention import gen_batch_prefill_module, get_batch_prefill_uri
    nvcc = subprocess.run([os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc"),
                           "--version"], capture_output=True, text=True, check=False).stdout.strip().splitlines()
    info = {"flashinfer": fi.__version__, "arch": a.flashinfer_arch, "nvcc": nvcc[-2] if len(nvcc) > 1 else "?",
            "config": {"heads": a.heads, "kv_heads": a.kv_heads, "head_size": a.head_size,
                       "block_size": a.block_size}, "modules": {}}
    mods = {}
    head_sizes = parse_ints(a.flashinfer_prebuild_head_sizes) if a.flashinfer_prebuild_head_sizes else [a.head_size]
    for d in head_sizes:  # one archive for every head size the rows use (the sweep's 64, 128, 256)
        a.head_size = d
        for kind, backend, args in fi_requested_modules(fi, a, fi_prebuild_kinds(a)):
            uri = get_batch_prefill_uri(backend, *args)
            m = mods.setdefault(uri, {"backend": backend, "args": args, "kinds": []})
            m["kinds"].append(kind if kind != "prefill" else f"prefill ({backend})")
            log(f"prebuild: D={d} {kind} asks for {backend} {uri}")
    info["config"]["head_sizes"] = head_sizes
    out = os.path.join(a.flashinfer_wheels, fi_aot_name(fi.__version__, a.flashinfer_arch))
    with tarfile.open(out + ".tmp", "w:gz") as tf:
        for uri, m in mods.items():
            t0 = time.monotonic()
            spec = gen_batch_prefill_module(m["backend"], *m["args"])  # what get_batch_prefill_module builds
            assert spec.name == uri, (spec.name, uri)
            spec.build(verbose=a.verbose)
            so = spec.jit_library_path
            tf.add(so, arcname=f"{spec.name}/{spec.name}.so")
            info["modules"][spec.name] = {"kinds": m["kinds"], "backend": m["backend"],
                                          "args": [str(x) for x in m["args"]],
                                          "compile_s": round(time.monotonic() - t0, 1)}
            log(f"prebuild: {', '.join(m['kinds'])}: {spec.name}: {time.monotonic() - t0:.1f} s, "
                f"{os.path.getsize(so) / 1e6:.1f} MB")
        data = json.dumps(info, indent=1).encode()
        ti = tarfile.TarInfo("pagedattn-aot.json")
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    os.replace(out + ".tmp", out)
    log(f"prebuild: wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB; {info['nvcc']}; JIT workspace {base})")
    return 0


def fi_check_aot(a):
    """--flashinfer-check-aot (no GPU needed): installs the wheels and the prebuilt archive into a fresh
    --flashinfer-target, sets FLASHINFER_DISABLE_JIT=1 and a fresh JIT workspace, asks the wrappers (dry run) for
    their modules (the kinds and prefill backends --flashinfer-prebuild packs) and loads each through FlashInfer's
    own build_and_load: every one must come from data/aot without compiling. Exit 0 when all load."""
    shutil.rmtree(a.flashinfer_target, ignore_errors=True)
    shutil.rmtree(a.flashinfer_target + "-jit", ignore_errors=True)
    os.environ["FLASHINFER_DISABLE_JIT"] = "1"
    fi_env(a, a.flashinfer_arch)
    fi = fi_install_import(a, "check-aot")
    if fi is None:
        return 1
    from flashinfer.jit.attention import gen_batch_prefill_module
    bad = 0
    for kind, backend, args in fi_requested_modules(fi, a, fi_prebuild_kinds(a)):  # what the prebuild packs
        spec = gen_batch_prefill_module(backend, *args)
        try:
            mod = spec.build_and_load()
            ok = spec.is_aot and hasattr(mod, "paged_run") and hasattr(mod, "plan")
            log(f"check-aot: {kind} ({backend}) {'loaded from ' + str(spec.aot_path) if ok else 'NOT from data/aot'}")
            bad += not ok
        except Exception as e:  # noqa: BLE001
            log(f"check-aot: {kind} ({backend}) {spec.name} did not load: {short(e, 400)}")
            bad += 1
    log(f"check-aot: {'ok' if not bad else f'{bad} FAILED'}")
    return 1 if bad else 0


def fi_import(ctx, arch=None):
    """Imports flashinfer, installing the carried wheels first if it is missing. Returns (module, None) or
    (None, why not). Records how in ctx.meta['flashinfer']."""
    a = ctx.args
    meta = ctx.meta.setdefault("flashinfer", {})
    fi_env(a, arch)
    first = None
    try:
        fi = importlib.import_module("flashinfer")
        meta["install"] = "already importable (" + os.path.dirname(fi.__file__) + ")"
    except ModuleNotFoundError as e:
        first = short(e, 120)
    except Exception as e:  # noqa: BLE001
        return None, "import flashinfer failed: " + short(e)
    if first:
        how, why = fi_install(a)
        if why:
            return None, f"not installed ({first}); {why}"
        meta["install"], meta["target"] = how, a.flashinfer_target
        for m in [m for m in sys.modules if m == "flashinfer" or m.startswith("flashinfer.")]:
            del sys.modules[m]  # a half-done import of an installed flashinfer missing a dependency
        fi_use_target(a)
        try:
            fi = importlib.import_module("flashinfer")
        except Exception as e:  # noqa: BLE001
            return None, f"import flashinfer failed after installing the wheels ({how}): {short(e)}"
    meta["version"] = getattr(fi, "__version__", "?")
    meta["env"] = {k: os.environ.get(k) for k in ("FLASHINFER_WORKSPACE_BASE", "FLASHINFER_CUDA_ARCH_LIST",
                                                  "TORCH_CUDA_ARCH_LIST", "FLASHINFER_NO_DOWNLOAD")}
    return fi, None


def fi_build_errors(text):
    """The compiler's error lines in ninja's output (not the command lines), paths cut to file names."""
    return [re.sub(r"(?:/[^/\s:()]+)+/([^/\s:()]+)", r"\1", ln.strip()) for ln in text.splitlines()
            if re.search(r"\berror\b\s*[:#]|fatal error", ln, re.IGNORECASE) and "Ninja build failed" not in ln
            and not ln.lstrip().startswith(("[", "Traceback", "File "))]


def fi_one_line(text, n=300):
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def fi_error(e):
    """An exception as a row note (at most 300 characters): FlashInfer's 'Ninja build failed' text starts with
    the compile commands, so the compiler's error lines are picked out."""
    text = f"{type(e).__name__}: {e}"
    errs = fi_build_errors(text) if "Ninja build failed" in text else []
    return fi_one_line("Ninja build failed: " + " | ".join(errs[:4]) if errs else text)


def fi_tree_mask_packed(L, T):
    """One request's custom mask for a draft tree of T nodes after L past tokens: [T, L + T] (every past key
    visible; among the new ones tree_mask: a node sees itself and its ancestors), flattened row-major and packed
    8 to a byte, least significant bit first. That is the layout the FA2 kernel reads (bit (t * (L + T) + j) % 8
    of byte (t * (L + T) + j) // 8, variants.cuh) and what plan(custom_mask=...) would make with segment_packbits
    (bitorder "little"); it is packed here on the host because segment_packbits runs FlashInfer's quantization
    module, a JIT module of its own that the prebuilt archive does not hold."""
    m = torch.ones(T, L + T, dtype=torch.bool)
    m[:, L:] = tree_mask(T)
    bits = m.flatten().to(torch.uint8)
    bits = torch.cat([bits, bits.new_zeros(-bits.numel() % 8)]).view(-1, 8).to(torch.int32)
    return (bits << torch.arange(8, dtype=torch.int32)).sum(1).to(torch.uint8)


# 512 MB of float workspace: 256 MB overflowed (batch_prefill_tmp_v of 264 MB) at D = 256, G = 16 in run
# sw4, so FlashInfer ran none of those rows but T = 1 (its whole fa2 module failed at warm-up)
def fi_plan(fi, a, dev, B, S, T, table, kind, ws_bytes=512 << 20):
    """A planned FlashInfer wrapper for B sequences of S = L + T tokens in HND pages of --block-size
    (table [B, n] int32), T new tokens each (fi_jobs' kinds):
      decode    T=1, BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True), backend --flashinfer-backend
      tcdecode  T>1, the same with plan(q_len_per_req=T): causal within the request, bottom-right aligned
      prefill   T>1, BatchPrefillWithPagedKVCacheWrapper, causal=True (bottom-right aligned: FlashInfer aligns
                the query rows to the end of the KV), backend --flashinfer-prefill-backend
      decode-fp8, tcdecode-fp8  decode and tcdecode planned with kv_data_type float8_e4m3fn (f16 queries and
                output; run() with FI_FP8_SCALES); backend auto written out as fa2 (fi_decode_backend)
      tree      T nodes of a draft tree (tree_mask), B = 1: BatchPrefillWithPagedKVCacheWrapper, backend fa2
                (FlashInfer's FA3 path takes no custom mask), causal=False, planned with packed_custom_mask
                (fi_tree_mask_packed; custom_mask_buf and mask_indptr_buf given at construction). One request
                only: given a packed mask, plan() fills mask_indptr with bit offsets (_compute_page_mask_indptr)
                while the kernel adds mask_indptr[request] to the byte pointer, so only request 0 (offset 0) is
                read right. Its bytes are a chain's of T (T query rows, the L + T keys read once), as pagedattn's
                sweep counts its tree rows.
    The wrappers are made with use_cuda_graph=True (fixed index buffers), so their run() can be captured.
    Returns (wrapper, its workspace, description, the backend that the plan resolved)."""
    H, Hk, D, bs = a.heads, a.kv_heads, a.head_size, a.block_size
    kind, kv_dtype, _ = fi_kind_kv(kind)
    n = table.shape[1]
    ws = torch.zeros(ws_bytes, dtype=torch.uint8, device=dev)  # must be zero at first use
    kv_indptr = torch.arange(B + 1, device=dev, dtype=torch.int32) * n
    indices = table.flatten().contiguous()
    last = torch.full((B,), S - (n - 1) * bs, dtype=torch.int32, device=dev)
    bufs = [torch.empty_like(kv_indptr), torch.empty_like(indices), torch.empty_like(last)]
    if kind in ("decode", "tcdecode"):
        w = fi.BatchDecodeWithPagedKVCacheWrapper(
            ws, "HND", use_cuda_graph=True, use_tensor_cores=True, paged_kv_indptr_buffer=bufs[0],
            paged_kv_indices_buffer=bufs[1], paged_kv_last_page_len_buffer=bufs[2],
            backend=fi_decode_backend(a, kv_dtype))
        w.plan(kv_indptr, indices, last, H, Hk, D, bs, q_data_type=torch.float16, kv_data_type=kv_dtype,
               **({"q_len_per_req": T} if T > 1 else {}))
        what = "decode (T=1), tensor-core decode" if T == 1 else \
            f"tensor-core decode, q_len_per_req={T}, causal (bottom-right aligned)"
        if kv_dtype != torch.float16:
            what += ", e4m3 KV (k_scale = v_scale = 1), f16 q and out"
    elif kind == "tree":
        if B != 1:
            raise ValueError(f"the tree kind plans one request (FlashInfer's mask_indptr of a packed mask), got {B}")
        qo_indptr = torch.tensor([0, T], device=dev, dtype=torch.int32)
        packed = fi_tree_mask_packed(S - T, T).to(dev)
        w = fi.BatchPrefillWithPagedKVCacheWrapper(
            ws, "HND", use_cuda_graph=True, qo_indptr_buf=torch.empty_like(qo_indptr), paged_kv_indptr_buf=bufs[0],
            paged_kv_indices_buf=bufs[1], paged_kv_last_page_len_buf=bufs[2], custom_mask_buf=torch.empty_like(packed),
            mask_indptr_buf=torch.empty_like(qo_indptr), backend="fa2")
        w.plan(qo_indptr, kv_indptr, indices, last, H, Hk, D, bs, packed_custom_mask=packed, causal=False,
               q_data_type=torch.float16, kv_data_type=torch.float16)
        what = f"paged prefill, custom mask: draft tree of {T} nodes (node i's parent (i - 1) // 2; the past, the " \
               "node and its ancestors visible), packed on the host"
    else:
        qo_indptr = torch.arange(B + 1, device=dev, dtype=torch.int32) * T
        w = fi.BatchPrefillWithPagedKVCacheWrapper(
            ws, "HND", use_cuda_graph=True, qo_indptr_buf=torch.empty_like(qo_indptr), paged_kv_indptr_buf=bufs[0],
            paged_kv_indices_buf=bufs[1], paged_kv_last_page_len_buf=bufs[2], backend=a.flashinfer_prefill_backend)
        w.plan(qo_indptr, kv_indptr, indices, last, H, Hk, D, bs, causal=True, q_data_type=torch.float16,
               kv_data_type=torch.float16)
        what = "paged prefill, causal (bottom-right aligned)"
    ran = str(getattr(w, "_backend", "?"))
    return w, ws, f"{what}; backend {ran}", ran


def fi_warmup_child(a):
    """--flashinfer-warmup KIND[,KIND] (a child process): per kind, one call of a tiny problem with the run's dtype,
    heads and head size, which builds (JIT-compiles) or loads the module that the timed calls of that kind load.
    After each kind, and at the end, it prints FI_MARK + JSON {ok, s, kinds: {kind: {ok, s, what, backend | error}}}
    (the parent reads the last one)."""
    t0 = time.monotonic()
    res = {"ok": False, "kinds": {}}
    try:
        fi_env(a)
        if not a.flashinfer_no_target:
            fi_use_target(a)
        import flashinfer as fi
        res["version"] = getattr(fi, "__version__", "?")
        dev = torch.device("cuda")
        for kind in a.flashinfer_warmup.split(","):
            t1 = time.monotonic()
            r = res["kinds"][kind] = {"ok": False}
            try:
                base, kv_dtype, _ = fi_kind_kv(kind)
                T = 1 if base == "decode" else 2
                B, bs = 1, a.block_size
                S = 2 * bs + T
                n = -(-S // bs)
                table = torch.arange(n, dtype=torch.int32, device=dev).view(B, n)
                w, _, r["what"], r["backend"] = fi_plan(fi, a, dev, B, S, T, table, kind)
                kc = torch.randn(n, a.kv_heads, bs, a.head_size, device=dev, dtype=torch.float16).to(kv_dtype)
                q = torch.randn(B * T, a.heads, a.head_size, device=dev, dtype=torch.float16)
                w.run(q, (kc, kc), **(FI_FP8_SCALES if kv_dtype != torch.float16 else {}))
                torch.cuda.synchronize()
                r["ok"] = True
            except Exception as e:  # noqa: BLE001 - reported to the parent, per kind
                traceback.print_exc()
                r["error"] = fi_error(e)
            r["s"] = round(time.monotonic() - t1, 1)
            res["s"] = round(time.monotonic() - t0, 1)
            print("\n" + FI_MARK + json.dumps(res), flush=True)  # so far: kept if a later kind is killed
        res["ok"] = all(r["ok"] for r in res["kinds"].values())
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        traceback.print_exc()
        res["error"] = fi_error(e)
    res["s"] = round(time.monotonic() - t0, 1)
    print("\n" + FI_MARK + json.dumps(res), flush=True)
    return 0 if res["ok"] else 1


def fi_compile(ctx, kinds):
    """Builds (or loads the prebuilt) FlashInfer modules for `kinds` in child processes, one per module
    (fi_module_key: kinds that share a module warm up one after the other in one child), in parallel, bounded by
    --flashinfer-compile-seconds and by the time left. Returns {kind: None (ready) or why not}."""
    a = ctx.args
    meta = ctx.meta.setdefault("flashinfer", {})
    left = ctx.left() - 10.0  # keep a little for the rows' own first calls
    limit = min(a.flashinfer_compile_seconds, left)
    if left < 10:
        why = (f"skipped: time budget --max-seconds {a.max_seconds:g} (at {ctx.elapsed():.0f} s); FlashInfer's "
               f"JIT compile needs up to --flashinfer-compile-seconds {a.flashinfer_compile_seconds:g}")
        return {k: why for k in kinds}
    base = os.environ["FLASHINFER_WORKSPACE_BASE"]
    os.makedirs(base, exist_ok=True)
    env = dict(os.environ)
    target = meta.get("target")  # None: flashinfer was importable without the carried wheels
    env["PYTHONPATH"] = os.pathsep.join(p for p in [target, env.get("PYTHONPATH")] if p)
    # ninja -j per child: all cores each. A module has 10 sources; the FA2 ones take ~15 s each, the FA3 (sm90)
    # ones 70-110 s (measured on one core of a 2-core box), so the slow child soon has the cores to itself.
    env.setdefault("MAX_JOBS", str(os.cpu_count() or 1))
    env.setdefault("FLASHINFER_JIT_VERBOSE", "1")  # ninja's progress and compiler errors go to the child's log
    meta["max_jobs"] = env["MAX_JOBS"]
    groups = {}
    for k in kinds:
        groups.setdefault(fi_module_key(a, k), []).append(k)
    procs = {}
    t0 = time.monotonic()
    for key, ks in groups.items():
        path = os.path.join(base, f"warmup-{key}.log")
        out = open(path, "w")
        cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_peers.py"), "--flashinfer-warmup", ",".join(ks),
               "--heads", str(a.heads), "--kv-heads", str(a.kv_heads), "--head-size", str(a.head_size),
               "--block-size", str(a.block_size), "--flashinfer-backend", a.flashinfer_backend,
               "--flashinfer-prefill-backend", a.flashinfer_prefill_backend,
               "--flashinfer-target", a.flashinfer_target] + ([] if target else ["--flashinfer-no-target"])
        procs[key] = (subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True),
                      out, path, ks)
    log(f"flashinfer: JIT compile (or prebuilt load) + first call of "
        f"{'; '.join(k + ': ' + ', '.join(ks) for k, ks in groups.items())} started (limit {limit:.0f} s, "
        f"MAX_JOBS {env['MAX_JOBS']} each, logs {base}/warmup-*.log)")
    status, took = {}, {}
    for key, (p, out, path, ks) in procs.items():
        timed_out = False
        try:
            p.wait(timeout=max(0.1, t0 + limit - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the child and its ninja/nvcc (its own session)
            except OSError:
                pass
            p.wait()
        out.close()
        with open(path, errors="replace") as f:
            text = f.read()
        lines = [ln for ln in text.splitlines() if ln.strip()]
        res = None
        for ln in reversed(lines):
            if ln.startswith(FI_MARK):
                res = json.loads(ln[len(FI_MARK):])
                break
        took[key] = res["s"] if res else round(time.monotonic() - t0, 1)
        if res:
            meta.setdefault("warmup_s", {}).update({k: r.get("s") for k, r in res.get("kinds", {}).items()})
        for k in ks:
            r = (res or {}).get("kinds", {}).get(k)
            if r and r.get("ok"):  # done before any time-out
                status[k] = None
                meta.setdefault("backend", {})[k] = r.get("what")
            elif timed_out:
                cut = " (cut to the time left in --max-seconds)" if limit < a.flashinfer_compile_seconds else ""
                steps = re.findall(r"^\[(\d+/\d+)\].* -c (\S+)", text, re.MULTILINE)
                where = f"ninja at step {steps[-1][0]} ({os.path.basename(steps[-1][1])})" if steps else \
                    "last output: " + (lines[-1][:120] if lines else "(none)")
                status[k] = (f"JIT compile + first call of the {k} module ({key}) not done after {limit:.0f} s "
                             f"(--flashinfer-compile-seconds {a.flashinfer_compile_seconds:g}{cut}); killed, {where}")
            elif r or res:
                status[k] = (r or res).get("error") or f"warm-up failed (exit {p.returncode})"
                errs = fi_build_errors(text) if "Ninja build failed" in status[k] else []
                if errs:  # verbose ninja: the compiler's errors are in the log, not in the exception
                    status[k] = fi_one_line("Ninja build failed: " + " | ".join(errs[:4]))
            else:
                status[k] = f"JIT warm-up process exited with {p.returncode}: " + " ".join(lines[-3:])[-250:]
        failed = [k for k in ks if status[k]]
        if failed:
            log(f"flashinfer: {key} module ({', '.join(failed)}) failed after {took[key]:.1f} s: {status[failed[0]]}")
            log("  last lines of " + path + ":\n    " + "\n    ".join(ln[:240] for ln in lines[-25:]))
        built = re.findall(r"^\[(\d+)/(\d+)\]", text, re.MULTILINE)
        meta.setdefault("compiled", {})[key] = ("killed; " if timed_out else "") + \
            ("ninja ran (" + built[-1][1] + " steps)" if built else "no ninja steps in the log" +
             ("" if timed_out else " (prebuilt module or JIT cache)"))
    wall = time.monotonic() - t0
    meta["compile_s"], meta["compile_wall_s"] = took, round(wall, 1)
    meta["compile_ok"] = {k: status[k] is None for k in kinds}
    log(f"flashinfer: JIT compile + first call took {wall:.1f} s wall ("
        + ", ".join(f"{key} {took[key]:.1f} s {meta['compiled'][key]}" for key in groups) + "; "
        + ", ".join(f"{k} {'ok' if status[k] is None else 'FAILED'}" for k in kinds) + ")")
    return status


def run_flashinfer_all(ctx, scen):
    """Every FlashInfer row: import (installing the carried wheels), JIT compile (bounded), then the rows.
    Every row that cannot run says why."""
    a = ctx.args
    kinds = sorted({k for name, _, _, Ts in scen for T, tree in fi_calls(a, name, Ts) for _, k in fi_jobs(a, T, tree)})
    fi, why = fi_import(ctx, None if ctx.cpu else fi_arch())
    status = {k: why for k in kinds}
    if not why:
        log(f"flashinfer {ctx.meta['flashinfer'].get('version')}: {ctx.meta['flashinfer'].get('install')}")
        status = fi_compile(ctx, kinds)
    for name, B, Ls, Ts in scen:
        for L in Ls:
            for T, tree in fi_calls(a, name, Ts):
                for system, kind in fi_jobs(a, T, tree):
                    st = status[kind]
                    if st:
                        skip_rows(ctx, system, name, B, L, [T], "skipped" if st.startswith("skipped") else "not run",
                                  st, fi_kind_kv(kind)[2], tree)
                    else:
                        run_flashinfer(ctx, fi, name, B, L, T, system, kind)


def run_flashinfer(ctx, fi, scenario, B, L, T, system, kind):
    a = ctx.args
    H, Hk, D, bs = a.heads, a.kv_heads, a.head_size, a.block_size
    dev = ctx.dev
    base, kv_dtype, kv_bytes = fi_kind_kv(kind)
    tree = base == "tree"
    why = over_budget(ctx, system, 0.0 if system in ctx.est else ctx.est.get("flashinfer", 30.0))
    if why:
        skip_rows(ctx, system, scenario, B, L, [T], "skipped", why, kv_bytes, tree)
        return
    t0 = time.monotonic()
    row = new_row(ctx, system, scenario, B, L, T, kv_bytes, tree)
    row["gqa"], row["kv_layout"] = "native", f"HND pages [pages, Hk, {bs}, D], shuffled table"
    if kv_dtype != torch.float16:
        row["kv_layout"] += ", float8_e4m3fn (randn rounded to e4m3), k_scale = v_scale = 1"
    row["backend"] = ""
    scales = FI_FP8_SCALES if kv_dtype != torch.float16 else {}
    try:
        S = L + T
        n = -(-S // bs)
        sets = layer_sets(ctx, bytes_terms(a, B, L, T, kv_bytes)["kv"])
        gen = torch.Generator(device=dev).manual_seed(a.seed + L + T)
        pages = B * n
        kc = [[torch.randn(pages, Hk, bs, D, generator=gen, device=dev, dtype=torch.float16).to(kv_dtype)
               for _ in range(a.layers)] for _ in range(sets)]
        vc = [[torch.randn(pages, Hk, bs, D, generator=gen, device=dev, dtype=torch.float16).to(kv_dtype)
               for _ in range(a.layers)] for _ in range(sets)]
        q = [[torch.randn(B * T, H, D, generator=gen, device=dev, dtype=torch.float16)
              for _ in range(a.layers)] for _ in range(sets)]
        table = torch.randperm(pages, device=dev).to(torch.int32).view(B, n)
        w, _, row["mask"], row["backend"] = fi_plan(fi, a, dev, B, S, T, table, kind)

        def call(s_, l_):
            return w.run(q[s_][l_], (kc[s_][l_], vc[s_][l_]), **scales)

        tc = time.monotonic()
        out0 = call(0, 0)
        ctx.sync()
        row["note"] = f"first call {time.monotonic() - tc:.1f} s"

        pos = torch.arange(S, device=dev)
        pg, off = table[:, pos // bs].long(), pos % bs  # [B, S]
        # the reference reads the cache as stored: e4m3 values are exact in f16 (scales 1: nothing to apply)
        kl = kc[0][0].to(torch.float16)[pg, :, off].permute(0, 2, 1, 3)  # [B, Hk, S, D]
        vl = vc[0][0].to(torch.float16)[pg, :, off].permute(0, 2, 1, 3)
        ref = reference(q[0][0].view(B, T, H, D).permute(0, 2, 1, 3), kl, vl, L, tree_mask(T) if tree else None)
        kl = vl = None

        def check(out):  # flashinfer's output is [B*T, H, D]
            return rel_err(out.reshape(B, T, H, D).permute(0, 2, 1, 3), ref)

        calls = [[(lambda s_=s_, l_=l_: call(s_, l_)) for l_ in range(a.layers)] for s_ in range(sets)]
        timed_row(ctx, row, calls, check, out0, t0)
        kc = vc = q = w = None
    except Exception as e:  # noqa: BLE001
        row["status"], row["note"] = "error", fi_error(e)
        if a.verbose:
            traceback.print_exc()
        finish_row(ctx, row, t0)
    if not ctx.cpu:
        torch.cuda.empty_cache()
