"""``python -m kubetune.runtime``: run the trial attempt the environment describes (see :mod:`.main`)."""

import sys

from kubetune.runtime.main import main

sys.exit(main())
