"""``python -m medic.agent``: the agent without the control plane's packages (see main)."""

from medic.agent.main import main

raise SystemExit(main())
