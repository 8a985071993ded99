"""What a job looks like in Discord: its embed and text (``render``) and its persistent buttons."""
