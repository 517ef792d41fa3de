from app import add

assert add(2, 3) == 5, add(2, 3)
print('1 passed')
