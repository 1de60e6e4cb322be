"""The live panel (ipywidgets + bqplot); its modules import those only when a panel is asked for."""
