"""scripts/nli_filter_effect.py: bad arguments exit 2 with the flag named (the measurement itself needs trained fold
models and the data; its figures are in the README, not asserted here)."""

from __future__ import annotations

from script_loader import load_script


def _script():
    return load_script("nli_filter_effect")


def test_missing_cv_dir_exits_2_naming_it(tmp_path, capsys):
    mod = _script()
    assert mod.main(["--cv-dir", str(tmp_path / "none"), "--explainer", "x", "--data-dir", str(tmp_path)]) == 2
    assert "--cv-dir" in capsys.readouterr().err
    # the three variants the README reports: Detector alone, filter without the guard, the default
    assert list(mod.VARIANTS) == ["detector only", "+ NLI filter, no exact-check guard",
                                  "+ NLI filter + exact-check guard (default)"]
