"""The parsers of the ``pcmr`` commands, one module per command (named as its run module in
:mod:`pcmr.cli`), each exposing ``add_parser(subparsers)``.

They import neither torch nor the library modules that do (names and defaults their help quotes come
from :mod:`pcmr.catalog`), so ``pcmr COMMAND --help`` and a refused argument answer at once; the
command's run module (``pcmr.cli.COMMAND``, which loads the library) is imported only once the
arguments have been read.
"""
