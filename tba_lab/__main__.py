import sys

from tba_lab.cli import main

sys.exit(main())
