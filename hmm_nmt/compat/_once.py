"""The install-once guard shared by every patch of :mod:`hmm_nmt.compat`."""
import functools


def install_once(install):
    """Run ``install`` until it succeeds, then never again.

    ``install`` returns ``False`` when there is nothing to patch (e.g. CUDA is present, or fairseq is
    missing); anything else means the patch is in place. The wrapper returns whether the patch is in place.
    The flag lives in the ``_installed`` global of the patch's own module (one patch per module), so a test
    can reset it with ``monkeypatch.setattr(module, "_installed", False)``.
    """
    module_globals = install.__globals__
    module_globals.setdefault("_installed", False)

    @functools.wraps(install)
    def wrapper():
        if module_globals["_installed"]:
            return True
        if install() is False:
            return False
        module_globals["_installed"] = True
        return True

    return wrapper
