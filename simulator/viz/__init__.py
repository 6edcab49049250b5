"""Looking at clouds: colours, Open3D views and headless renders, range images, reports."""
