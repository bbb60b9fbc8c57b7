"""`kit ab --dry-run` says what each arm runs, overlay included: two twin arms of one spec
that differ only by a source overlay are told apart (each names its own tree, or none)."""

from __future__ import annotations

from pathlib import Path

from tests.support import REPO, kit

CORPUS = REPO / "kits" / "corpus"


def _arm_lines(output: str) -> dict[str, str]:
    lines = [line.strip() for line in output.splitlines() if line.startswith("  ")]
    return {line.partition(":")[0]: line for line in lines}


def test_the_dry_run_names_each_arms_overlay(tmp_path: Path) -> None:
    fix_tree = CORPUS / "overlays" / "recompute-strands-loads"
    base_tree = tmp_path / "base-tree"
    (base_tree / "vllm").mkdir(parents=True)  # a tree of no changed files
    done = kit(
        "ab", "--dry-run", "--kit", str(CORPUS / "kits" / "recompute-strands-loads.toml"),
        "--base", "twin:stock", "--fix", "twin:stock",
        "--overlay", f"fix={fix_tree}", "-o", str(tmp_path / "runs"),
        env={"COLUMNS": "400"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    arms = _arm_lines(done.stdout)
    assert arms["fix"].endswith(f"; overlay {fix_tree})")
    assert "overlay" not in arms["base"]
    done = kit(
        "ab", "--dry-run", "--kit", str(CORPUS / "kits" / "recompute-strands-loads.toml"),
        "--base", "twin:stock", "--fix", "twin:stock", "--overlay", f"base={base_tree}",
        "--overlay", f"fix={fix_tree}", "-o", str(tmp_path / "runs"), env={"COLUMNS": "400"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    arms = _arm_lines(done.stdout)
    assert arms["base"].endswith(f"; overlay {base_tree})")
    assert arms["fix"].endswith(f"; overlay {fix_tree})")


def test_an_arm_without_an_overlay_reads_as_before() -> None:
    done = kit("ab", "--dry-run", "--base", "sim:base", "--fix", "sim:fix")
    assert done.returncode == 0, done.stderr
    assert "overlay" not in done.stdout
    assert "  base: sim:base (sim; gpus -; virtual clock)" in done.stdout
