if x:
	do()
	done()
