"""The engine (fastad_cy/) is the ground floor: it never imports the fastad package (nor do its stubs);
fastad.cuda registers its device support with the engine instead."""
import re
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[1] / "fastad_cy"
IMPORTS_FASTAD = re.compile(r"^\s*(from\s+fastad(\.\w+)*\s+c?import\b|c?import\s+fastad(\.\w+)*\b)",
                            re.M)


def test_no_engine_module_imports_the_fastad_package():
    sources = sorted(ENGINE.glob("*.pyx")) + sorted(ENGINE.glob("*.pxd")) + sorted(ENGINE.glob("*.pyi"))
    assert sources
    offenders = [f"{path.name}: {match.group(0).strip()}" for path in sources
                 for match in IMPORTS_FASTAD.finditer(path.read_text())]
    assert offenders == []


def test_the_scan_catches_late_imports_too():
    text = "def f():\n    from fastad.cuda import ops\n    import fastad\nfrom fastad_cy.graph cimport X\n"
    assert [m.group(0).strip() for m in IMPORTS_FASTAD.finditer(text)] == \
        ["from fastad.cuda import", "import fastad"]


def test_the_engine_alone_asks_for_device_support():
    # A fresh process with only the engine imported: a device request says what is missing.
    code = ("import numpy as np, fastad_cy.graph as g\n"
            "try:\n"
            "    g.Parameter(np.ones(2), device='cuda')\n"
            "except RuntimeError as e:\n"
            "    print(e)\n"
            "import sys; assert not any(m == 'fastad' or m.startswith('fastad.') for m in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "no device support is registered" in out.stdout
