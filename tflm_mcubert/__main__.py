from tflm_mcubert.cli import main

raise SystemExit(main())
