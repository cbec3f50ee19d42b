from mlxhost.cli import main

main()
