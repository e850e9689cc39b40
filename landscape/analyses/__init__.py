"""The analyses, one folder or module each: surface, hessian, fourier, lesion, similarity, trajectory."""
