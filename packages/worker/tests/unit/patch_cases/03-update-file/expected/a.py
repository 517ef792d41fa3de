def foo():
    return 10


def bar():
    return 2
