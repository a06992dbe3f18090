"""What runs write and read back: CSV/SDF export (``export``), the resume journal (``journal``), projects
(``project``; read back by ``project_read``) and fingerprint posteriors (``posteriors``).

May import: ``engine.insight`` and below.
"""
