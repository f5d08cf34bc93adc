"""The one place for other libraries' private APIs: torch (``torch``), CPython (``cpython``),
Taichi (``taichi``).

Every private name the package uses is read here, once, behind a function with a public
meaning and a safe default: where the name has moved, the function still answers (slower, or
more conservatively) and the name is listed in the module's ``MISSING``. Nothing else in the
package touches a private name of these libraries; ``tests/test_compat.py`` fails loudly when
an entry is missing on the versions the project tests with, and names it.
"""
