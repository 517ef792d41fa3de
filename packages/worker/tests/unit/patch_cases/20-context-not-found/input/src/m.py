def foo():
    return 1


def bar():
    return 2
