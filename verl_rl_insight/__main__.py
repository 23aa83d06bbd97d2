from verl_rl_insight.commands import main

raise SystemExit(main())
