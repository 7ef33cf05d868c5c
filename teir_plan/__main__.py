import sys

from teir_plan.cli import main

sys.exit(main())
