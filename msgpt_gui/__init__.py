"""MS-GPT Desktop: the PySide6 application (issue "The desktop application")."""
