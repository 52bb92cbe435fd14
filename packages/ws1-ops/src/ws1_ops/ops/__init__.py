"""One module per chain node: the public function and its autograd.Function."""
