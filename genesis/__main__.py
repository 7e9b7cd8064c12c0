from genesis.cli import main

main()
