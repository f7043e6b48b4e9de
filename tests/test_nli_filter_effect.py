"""scripts/nli_filter_effect.py: bad arguments exit 2 with the flag named (the measurement itself needs trained fold
models and the data; its figures are in the README, not asserted here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def _script():
    path = Path(__file__).parents[1] / "scripts" / "nli_filter_effect.py"
    spec = importlib.util.spec_from_file_location("nli_filter_effect", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_missing_cv_dir_exits_2_naming_it(tmp_path, capsys):
    mod = _script()
    assert mod.main(["--cv-dir", str(tmp_path / "none"), "--explainer", "x", "--data-dir", str(tmp_path)]) == 2
    assert "--cv-dir" in capsys.readouterr().err
    # the three variants the README reports: Detector alone, filter without the guard, the default
    assert list(mod.VARIANTS) == ["detector only", "+ NLI filter, no exact-check guard",
                                  "+ NLI filter + exact-check guard (default)"]
