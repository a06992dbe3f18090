"""MS-GPT Desktop: the PySide6 application (issue "The desktop application").

Its Qt-free layer is :mod:`msgpt_gui.logic`; the modules here are the window, its views and controllers. This
file imports nothing, so that the Qt-free layer imports without PySide6.
"""
