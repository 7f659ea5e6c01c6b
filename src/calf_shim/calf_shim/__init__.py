"""Network models, the virtual-time NetworkedEnv, the shim node and trace recording."""
