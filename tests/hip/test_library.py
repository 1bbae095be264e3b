"""Where libamdhip64 is looked for (pure candidate list) and what loading reports."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocmseat.hip import library


def test_explicit_path_wins_over_everything() -> None:
    env = {"ROCMSEAT_HIP_LIBRARY": "/x/lib.so", "ROCM_PATH": "/rocm"}
    assert library.candidates(env, Path("/given.so")) == ["/given.so"]
    assert library.candidates(env) == ["/x/lib.so"]


def test_search_order_rocm_path_hip_path_opt_rocm_torch_then_loader() -> None:
    got = library.candidates(
        {"ROCM_PATH": "/rocm", "HIP_PATH": "/hip"}, torch_lib=Path("/venv/torch/lib"))
    dirs = [str(Path(c).parent) for c in got if "/" in c]
    assert list(dict.fromkeys(dirs)) == ["/rocm/lib", "/hip/lib", "/opt/rocm/lib",
                                         "/venv/torch/lib"]
    assert got[:4] == [f"/rocm/lib/{n}" for n in
                       ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                        "libamdhip64.so.5")]
    assert got[-4:] == ["libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6",
                        "libamdhip64.so.5"]


def test_same_directory_twice_is_tried_once() -> None:
    got = library.candidates({"ROCM_PATH": "/opt/rocm", "HIP_PATH": "/opt/rocm"})
    assert len(got) == len(set(got)) == 8


def test_missing_explicit_library_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(library.LibraryNotFoundError) as err:
        library.load({}, tmp_path / "nope.so")
    assert str(err.value) == \
        f"no HIP runtime (libamdhip64) could be loaded: {tmp_path / 'nope.so'}: no such file"


def test_unloadable_file_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "libamdhip64.so"
    bad.write_text("not an ELF file\n" * 100)
    with pytest.raises(library.LibraryNotFoundError) as err:
        library.load({}, bad)
    assert str(bad) in str(err.value)
    assert "invalid ELF header" in str(err.value)
