"""``python -m nbgpu.cli``: the same as the ``nbgpu`` command."""

import sys

from . import main

sys.exit(main())
