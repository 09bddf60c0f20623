import sys

from pdkit.cli.main import main

sys.exit(main())
