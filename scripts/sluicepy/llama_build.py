# scripts/sluicepy/llama_build.py: llama.cpp's programs for the side-by-side
# benchmarks (scripts/bench-vs-llama*), built from a source tree the caller
# fetched (CPU backend, -march=native) into a directory outside this
# checkout; never vendored. Installs cmake from Debian when it is missing.
import os
import shutil
import subprocess

from . import SluiceError


def build_llama(src, build_dir, targets, prebuilt=False):
    """build_dir/bin/<target> for each of `targets`, building the missing ones
    from `src`. A `prebuilt` build_dir is only looked in: a missing target is
    a SluiceError naming build_dir."""
    binaries = [os.path.join(build_dir, "bin", t) for t in targets]
    missing = [b for b in binaries if not os.path.exists(b)]
    if not missing:
        return binaries
    if prebuilt:
        raise SluiceError(f"{build_dir}: no {', '.join(missing)}")
    if shutil.which("cmake") is None:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "cmake"], check=True,
                       env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "-S", src, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
                    "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build_dir, "--target", *targets, "-j", str(os.cpu_count() or 1)],
                   check=True, stdout=subprocess.DEVNULL)
    return binaries
