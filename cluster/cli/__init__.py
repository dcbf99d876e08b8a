"""The ``pulse`` command line: ``app`` builds the root group from one module per command
group; ``base`` holds what they share. The ``node`` command is added by ``node.cli``."""
