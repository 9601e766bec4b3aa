"""Performance CI: two revisions measured interleaved (``ab``), results by commit (``history``),
and the bisection of a regression (``bisect``).

- ``sides``: a revision built in a git worktree of its own, its perfkit run as a subprocess;
- ``units``: a campaign's units as campaign files, their interleaved order, a side's runs merged;
- ``session``: the units of a campaign run on two sides, interleaved;
- ``ab``: ``perfkit ab``'s comparison and outputs; ``comment``: its pull-request comment;
- ``history``: a campaign's runs gathered by commit; ``bisect``: ``git bisect run`` with measured steps;
- ``plots``: their figures;
- ``gitlab_note``: the GitLab job's merge-request note, posted or updated;
- ``cifiles``: the CI file ``perfkit ci init`` writes into a user's repository (``templates/``).
"""
