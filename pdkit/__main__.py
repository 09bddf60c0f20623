import sys

from pdkit.cli import main

sys.exit(main())
