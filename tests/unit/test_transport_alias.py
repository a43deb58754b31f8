"""``pgsql://`` resolves in any Python process of this environment, even one
that never imports linectl (plain ``nameko shell``), via linectl-pgsql.pth."""

import subprocess
import sys


def test_alias_is_registered_at_interpreter_start_without_importing_shared():
    code = (
        "import sys; from kombu.transport import TRANSPORT_ALIASES as T; "
        "print(T.get('pgsql')); print('shared.config' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    alias, imported_config = out.stdout.split()
    assert alias == "shared.transport.pgsql:Transport"
    assert imported_config == "False"


def test_kombu_imported_before_shared_still_gets_the_alias():
    code = (
        "import kombu.transport as kt; import shared; print(kt.TRANSPORT_ALIASES['pgsql'])"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         timeout=60, env={"PYTHONPATH": ":".join(sys.path)})
    assert out.stdout.strip() == "shared.transport.pgsql:Transport", out.stderr
