"""Labs: perfkit across hosts. A lab is an Ansible inventory (``perfkit.lab.inventory``)."""
