if x:
	do_more()
	done()
