from tests.sysfs.conftest import copy_tree

__all__ = ["copy_tree"]
